"""The fleet's X.509 identities: a CA, certificates for devices, controllers and admins, and a CRL.

A CA folder holds ``ca.pem`` (give it to every controller, agent and broker), ``ca.key`` (mode 0600;
keep it offline), ``index.json`` (every certificate issued, for ``revoke``) and ``crl.pem`` (the
revocation list controllers and brokers enforce). A certificate's role is its subject's
organizational unit (``device``, ``controller``, ``admin`` or ``broker``) and is written into the common
name too (``edgefleet.sdk.kit.common_name``: a device's CN is its id, any other's ``<role>/<name>``, so
the broker's ACL tells them apart); the name is also the SAN URI ``urn:edgefleet:<role>:<name>``. A name
belongs to one role: ``issue`` refuses it for another while a certificate of the first is not revoked.
Keys are ECDSA P-256 (gRPC, OpenSSL and Mosquitto all take them).

Example::

    ca = init_ca(Path("fleet-ca"))
    issue(Path("fleet-ca"), "device", "cam-01", Path("certs"))
    revoke(Path("fleet-ca"), serial)
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edgefleet.sdk.kit import NAME_RE as _NAME_RE
from edgefleet.sdk.kit import certificate_role, common_name

from ._errors import CloudError

__all__ = [
    "check_tls_files",
    "CertError",
    "Identity",
    "Issued",
    "Role",
    "identity_of",
    "init_ca",
    "issue",
    "load_crl_serials",
    "revoke",
]

Role = Literal["device", "controller", "admin", "broker"]
ROLES: tuple[Role, ...] = ("device", "controller", "admin", "broker")
_SERVERS = ("controller", "broker")  # named by a host name or IP, with DNS/IP SANs
MAX_DAYS = 36500  # a hundred years: the longest validity --days takes (beyond it dates overflow)
_HOST_RE = re.compile(r"^[A-Za-z0-9*]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\Z")


class CertError(CloudError):
    """A CA or certificate operation failed (missing CA, bad name, unknown serial)."""


@dataclass(frozen=True)
class Issued:
    role: Role
    name: str
    serial: int
    cert: Path
    key: Path
    not_after: dt.datetime


@dataclass(frozen=True)
class Identity:
    """Who a verified peer certificate names."""

    role: str
    name: str
    serial: int


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _write_private(path: Path, data: bytes, force: bool) -> None:
    if path.exists() and not force:
        raise CertError(f"{path} exists; pass --force to overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)  # whatever the umask


def _write_public(path: Path, data: bytes, force: bool = True) -> None:
    if path.exists() and not force:
        raise CertError(f"{path} exists; pass --force to overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_ca(ca_dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate((ca_dir / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise CertError(f"{ca_dir}: no CA here ({Path(exc.filename).name} missing); run `certs init-ca`") from None
    except ValueError as exc:
        raise CertError(f"{ca_dir}: cannot read the CA: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"{ca_dir}/ca.key: expected an EC private key")
    if key.public_key() != cert.public_key():
        raise CertError(f"{ca_dir}: ca.key is not the key of ca.pem (what it signs would not verify)")
    if cert.not_valid_after_utc <= _now():
        raise CertError(f"{ca_dir}: the CA expired on {cert.not_valid_after_utc:%Y-%m-%d}; create a new one (init-ca)")
    return cert, key


def _check_days(days: int) -> None:
    if not 1 <= days <= MAX_DAYS:
        raise CertError(f"--days must be 1..{MAX_DAYS}, got {days}")


def _index(ca_dir: Path) -> list[dict[str, Any]]:
    path = ca_dir / "index.json"
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = data["certificates"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) and "serial" in e for e in entries):
            raise TypeError("not a list of certificates")
    except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CertError(f"{path}: damaged ({exc}); restore it from a backup before issuing or revoking") from None
    return list(entries)


def _save_index(ca_dir: Path, entries: list[dict[str, Any]]) -> None:
    _write_public(ca_dir / "index.json", json.dumps({"certificates": entries}, indent=2).encode())


def check_tls_files(
    ca: Path,
    cert: Path,
    key: Path,
    crl: Path | None,
    *,
    flags: tuple[str, str, str, str] = ("--ca", "--cert", "--key", "--crl"),
    cert_from_ca: bool = True,
) -> None:
    """What Mosquitto would refuse only when started (or, for a mismatched pair, at the first client): the
    files are PEM of the right kind, the key is the certificate's, the certificate and the CRL are the
    CA's (``cert_from_ca``: a controller's server certificate may come from elsewhere than the CA its
    clients chain to). Raises ValueError naming the file by its flag in ``flags``."""
    f_ca, f_cert, f_key, f_crl = flags

    def refused(what: str, path: Path, kind: str, exc: Exception) -> ValueError:
        why = (str(exc).splitlines() or [""])[0].split(". ")[0][:120]  # the first sentence, no FAQ links
        return ValueError(f"{what} {path}: not a PEM {kind} ({why})")

    try:
        ca_cert = x509.load_pem_x509_certificate(ca.read_bytes())
    except ValueError as exc:
        raise refused(f_ca, ca, "certificate", exc) from None
    try:
        server = x509.load_pem_x509_certificate(cert.read_bytes())
    except ValueError as exc:
        raise refused(f_cert, cert, "certificate", exc) from None
    try:
        private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:  # TypeError: the key is encrypted
        raise refused(f_key, key, "private key without a passphrase", exc) from None
    try:
        is_ca = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise ValueError(f"{f_ca} {ca}: not a CA certificate (give the fleet CA's ca.pem)")
    if private.public_key() != server.public_key():
        raise ValueError(f"{f_key} {key} is not the private key of {f_cert} {cert}")
    try:
        if cert_from_ca:
            server.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        raise ValueError(f"{f_cert} {cert} was not issued by {f_ca} {ca}") from None
    if crl is not None:
        try:
            revocations = x509.load_pem_x509_crl(crl.read_bytes())
        except ValueError as exc:
            raise refused(f_crl, crl, "revocation list", exc) from None
        ca_key = ca_cert.public_key()
        issuer_keys = (
            ec.EllipticCurvePublicKey,
            rsa.RSAPublicKey,
            ed25519.Ed25519PublicKey,
            ed448.Ed448PublicKey,
            dsa.DSAPublicKey,
        )
        signed = isinstance(ca_key, issuer_keys) and revocations.is_signature_valid(ca_key)
        if revocations.issuer != ca_cert.subject or not signed:
            raise ValueError(f"{f_crl} {crl} is not signed by {f_ca} {ca}")


def init_ca(ca_dir: Path, *, name: str = "edgefleet fleet CA", days: int = 3650, force: bool = False) -> Path:
    """Create the fleet CA in ``ca_dir`` (``ca.pem``, ``ca.key`` 0600, an empty ``crl.pem``)."""
    _check_days(days)
    if not 1 <= len(name) <= 64:
        raise CertError(f"--name must be 1..64 characters (an X.509 common name), got {len(name)}")
    if (ca_dir / "ca.key").exists() and not force:
        raise CertError(f"{ca_dir}/ca.key exists; pass --force to replace the CA (every certificate dies)")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private(ca_dir / "ca.key", _key_pem(key), force=True)
    _write_public(ca_dir / "ca.pem", cert.public_bytes(serialization.Encoding.PEM))
    _save_index(ca_dir, [])
    _write_crl(ca_dir, cert, key, [])
    return ca_dir / "ca.pem"


def _sans(role: Role, name: str, hosts: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = [x509.UniformResourceIdentifier(f"urn:edgefleet:{role}:{name}")]
    for h in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            if not _HOST_RE.match(h):
                raise CertError(f"{h!r} is neither an IP address nor a DNS name") from None
            out.append(x509.DNSName(h.lower()))
    return out


def issue(
    ca_dir: Path,
    role: Role,
    name: str,
    out_dir: Path,
    *,
    days: int = 365,
    hosts: list[str] | None = None,
    force: bool = False,
) -> Issued:
    """Issue a certificate for a device (``name`` = device id), a controller or a broker (``name`` = host
    name or IP; ``hosts`` adds SANs) or an admin; writes ``<name>.pem`` and ``<name>.key`` (0600) in
    ``out_dir``. A name another role's certificate holds (not revoked) is refused."""
    if role not in ROLES:
        raise CertError(f"role must be one of {', '.join(ROLES)}")
    if role in _SERVERS:
        if not _HOST_RE.match(name):
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise CertError(f"{role} {name!r} is neither a host name nor an IP address") from None
        hosts = [name, *(h for h in hosts or [] if h != name)]
    else:
        if not _NAME_RE.match(name):
            raise CertError(f"{role} name {name!r} must match [a-z0-9][a-z0-9._-]{{0,63}}")
        hosts = list(hosts or [])
    if len(common_name(role, name)) > 64:
        raise CertError(f"{role} name {name!r} is too long for a certificate's common name")
    _check_days(days)
    ca_cert, ca_key = _load_ca(ca_dir)
    entries = _index(ca_dir)  # read before anything is written: a damaged index must not leave a stray cert
    taken = sorted({e["role"] for e in entries if e.get("name") == name and e["role"] != role and not e["revoked_at"]})
    if taken:
        raise CertError(
            f"{name!r} is already the name of a {taken[0]} certificate; names are unique across roles "
            "(revoke that one first, or choose another name)"
        )
    cert_path, key_path = out_dir / f"{name}.pem", out_dir / f"{name}.key"
    if not force and (cert_path.exists() or key_path.exists()):
        raise CertError(f"{cert_path} or {key_path} exists; pass --force to overwrite")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    usages = {
        "device": [ExtendedKeyUsageOID.CLIENT_AUTH],
        "admin": [ExtendedKeyUsageOID.CLIENT_AUTH],
        # a controller serves gRPC and is an MQTT client of the broker
        "controller": [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        "broker": [ExtendedKeyUsageOID.SERVER_AUTH],  # serves MQTT; never a client
    }[role]
    serial = x509.random_serial_number()
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
                    x509.NameAttribute(NameOID.COMMON_NAME, common_name(role, name)),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(_sans(role, name, hosts)), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(key_path, _key_pem(key), force=True)
    _write_public(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    entries.append(
        {
            "serial": f"{serial:x}",
            "role": role,
            "name": name,
            "not_after": not_after.isoformat(),
            "revoked_at": None,
        }
    )
    _save_index(ca_dir, entries)
    return Issued(role, name, serial, cert_path, key_path, not_after)


def _write_crl(
    ca_dir: Path, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, revoked: list[dict[str, Any]]
) -> Path:
    now = _now()
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now - dt.timedelta(minutes=5))
        .next_update(now + dt.timedelta(days=30))
    )
    for e in revoked:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(int(e["serial"], 16))
            .revocation_date(dt.datetime.fromisoformat(e["revoked_at"]))
            .build()
        )
    crl = builder.sign(ca_key, hashes.SHA256())
    path = ca_dir / "crl.pem"
    _write_public(path, crl.public_bytes(serialization.Encoding.PEM))
    return path


def revoke(ca_dir: Path, serial: str) -> dict[str, Any]:
    """Revoke the certificate with hex ``serial`` (as ``issue`` printed it) and rewrite ``crl.pem``;
    re-signing also refreshes the CRL's next-update date. Returns the index entry."""
    ca_cert, ca_key = _load_ca(ca_dir)
    want = serial.lower().removeprefix("0x").replace(":", "")
    entries = _index(ca_dir)
    match = [e for e in entries if e["serial"] == want]
    if not match:
        raise CertError(f"{ca_dir}: no certificate with serial {serial} was issued by this CA")
    if match[0]["revoked_at"] is None:
        match[0]["revoked_at"] = _now().isoformat()
    _save_index(ca_dir, entries)
    _write_crl(ca_dir, ca_cert, ca_key, [e for e in entries if e["revoked_at"]])
    return match[0]


def list_issued(ca_dir: Path) -> list[dict[str, Any]]:
    """The index: needs ``ca.pem`` and ``index.json``, not ``ca.key`` (which is kept offline)."""
    if not (ca_dir / "ca.pem").is_file():
        raise CertError(f"{ca_dir}: no CA here (ca.pem missing); run `certs init-ca`")
    return _index(ca_dir)


def load_crl_serials(crl_path: Path, ca_pem: bytes | None = None) -> frozenset[int]:
    """The revoked serial numbers in a PEM CRL; with ``ca_pem`` its signature must verify."""
    try:
        crl = x509.load_pem_x509_crl(crl_path.read_bytes())
    except (OSError, ValueError) as exc:
        raise CertError(f"{crl_path}: cannot read the revocation list: {exc}") from None
    if ca_pem is not None:
        ca = x509.load_pem_x509_certificate(ca_pem)
        pub = ca.public_key()
        if not isinstance(pub, ec.EllipticCurvePublicKey) or not crl.is_signature_valid(pub):
            raise CertError(f"{crl_path}: the revocation list is not signed by the client CA")
    return frozenset(r.serial_number for r in crl)


def identity_of(cert_pem: bytes) -> Identity:
    """Role, name (without the role prefix of the common name) and serial of a (verified) peer
    certificate; the role is "" when the OU and the CN disagree."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    found = certificate_role(cert_pem)
    return Identity(role=found.role, name=found.name, serial=cert.serial_number)
