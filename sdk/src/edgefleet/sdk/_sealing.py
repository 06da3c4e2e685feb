"""Sealed secrets: a camera credential encrypted, on the operator's machine, to the public key of one
device's mTLS certificate, so that the controller stores and forwards only ciphertext and only that
device (holding the private key) can open it (the threat model is in docs/security.md).

ECIES on the certificate's own curve (P-256 for certificates from ``edgefleet certs``): an ephemeral key
pair, ECDH with the device's key, HKDF-SHA256 bound to the device id and the secret's name, AES-256-GCM
with the same binding as associated data. A sealed value moved to another device, or renamed to
another secret, does not open. Layout: ``EFS1 | ephemeral public key (X9.62 uncompressed) | nonce (12) |
ciphertext + tag``.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509 import load_pem_x509_certificate

from ._errors import EdgefleetError

__all__ = ["SealingError", "public_key_pem", "seal", "unseal"]

_MAGIC = b"EFS1"
MAX_SECRET = 4096


class SealingError(EdgefleetError):
    """A secret that cannot be sealed (no usable key) or opened (not sealed to this device, tampered)."""


def _binding(device_id: str, name: str) -> bytes:
    return f"edgefleet-secret/v1\x00{device_id}\x00{name}".encode()


def public_key_pem(pem: bytes) -> bytes:
    """The public key (PEM) of a certificate or public key given as PEM."""
    try:
        if b"CERTIFICATE" in pem:
            key = load_pem_x509_certificate(pem).public_key()
        else:
            key = serialization.load_pem_public_key(pem)  # type: ignore[assignment]
    except ValueError as exc:
        raise SealingError(f"not a PEM certificate or public key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise SealingError(
            f"secrets are sealed to EC keys (edgefleet certs issues P-256); this is {type(key).__name__}"
        )
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _kdf(shared: bytes, binding: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=binding).derive(shared)


def seal(device_key_pem: bytes, device_id: str, name: str, value: bytes) -> bytes:
    """Encrypt ``value`` so only the holder of ``device_key_pem``'s private key, as ``device_id``'s
    secret ``name``, can open it."""
    if not value:
        raise SealingError("the secret is empty")
    if len(value) > MAX_SECRET:
        raise SealingError(f"a secret holds at most {MAX_SECRET} bytes")
    key = serialization.load_pem_public_key(public_key_pem(device_key_pem))
    if not isinstance(key, ec.EllipticCurvePublicKey):  # public_key_pem checked; for the type checker
        raise SealingError("not an EC key")
    eph = ec.generate_private_key(key.curve)
    binding = _binding(device_id, name)
    aes = AESGCM(_kdf(eph.exchange(ec.ECDH(), key), binding))
    nonce = os.urandom(12)
    point = eph.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return _MAGIC + bytes([len(point)]) + point + nonce + aes.encrypt(nonce, value, binding)


def unseal(private_key_pem: bytes, device_id: str, name: str, sealed: bytes) -> bytes:
    """Open a value sealed to this device's key as its secret ``name``."""
    try:
        key = serialization.load_pem_private_key(private_key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise SealingError(f"the device key cannot be read: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SealingError("the device key is not an EC key")
    if len(sealed) < 6 or not sealed.startswith(_MAGIC):
        raise SealingError(f"secret {name!r}: not a sealed value")
    n = sealed[4]
    point, rest = sealed[5 : 5 + n], sealed[5 + n :]
    if len(point) != n or len(rest) < 12 + 16:
        raise SealingError(f"secret {name!r}: truncated")
    try:
        eph = ec.EllipticCurvePublicKey.from_encoded_point(key.curve, point)
        binding = _binding(device_id, name)
        return AESGCM(_kdf(key.exchange(ec.ECDH(), eph), binding)).decrypt(rest[:12], rest[12:], binding)
    except (InvalidTag, ValueError):
        raise SealingError(
            f"secret {name!r} does not open with this device's key (sealed to another device or another name, "
            "or altered)"
        ) from None
