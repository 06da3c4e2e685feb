"""The client TLS context the agent and the controller use for MQTT (through ``BrokerAddress``, the kit's
one broker address type), and the one rule for the role a fleet certificate carries, which the agent,
the controller and the broker config all read.

A fleet certificate's role (``device``, ``controller``, ``admin``, ``broker``) is its subject's OU, and it
is written into the common name too, where Mosquitto sees it (``use_identity_as_username``): a device's
CN is its device id (one MQTT topic level), every other role's CN is ``<role>/<name>``, so no other
certificate can ever match a device's topic level.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROLES", "CertificateRole", "certificate_role", "client_context", "common_name"]

ROLES = ("device", "controller", "admin", "broker")


def client_context(ca_file: Path | None, cert_file: Path | None, key_file: Path | None) -> ssl.SSLContext:
    """Server verified against ``ca_file`` (or the system store); ``cert_file``/``key_file``: the client's
    certificate. Raises ssl.SSLError or OSError for a file that is not usable."""
    ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    if cert_file is not None:
        ctx.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
    return ctx


def common_name(role: str, name: str) -> str:
    """The CN a fleet certificate of ``role`` named ``name`` carries."""
    return name if role == "device" else f"{role}/{name}"


@dataclass(frozen=True)
class CertificateRole:
    """What a certificate says about itself: ``role`` from the OU ("" when it has none, or when its CN
    contradicts it), ``name`` without the role prefix, ``cn`` as written, ``legacy`` for a non-device
    certificate issued before roles went into the CN (Mosquitto would treat it as a device)."""

    role: str
    name: str
    cn: str
    legacy: bool = False


def certificate_role(pem: bytes) -> CertificateRole:
    """Read the role of a PEM certificate. Raises ValueError when it is not a PEM certificate."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_pem_x509_certificate(pem)
    ou = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)]
    cns = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    role, cn = (ou[0] if ou else ""), (cns[0] if cns else "")
    prefix, sep, rest = cn.partition("/")
    if role not in ROLES:
        return CertificateRole(role, cn, cn)  # not a fleet role: nothing more to say
    if role == "device":
        return CertificateRole("" if sep else "device", cn, cn)
    if sep and prefix == role:
        return CertificateRole(role, rest, cn)
    if sep:
        return CertificateRole("", cn, cn)  # OU and CN disagree
    return CertificateRole(role, cn, cn, legacy=True)
