"""Ed25519 signatures over the canonical manifest (which holds every file's sha256)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ._errors import SignatureError
from ._manifest import Manifest, SignatureSpec, canonical_bytes

__all__ = [
    "PrivateKey",
    "PublicKey",
    "generate_signing_key",
    "key_id",
    "load_private_key",
    "load_public_key",
    "sign_manifest",
    "verify_manifest",
]

PrivateKey = Ed25519PrivateKey
PublicKey = Ed25519PublicKey


def key_id(public_key: PublicKey) -> str:
    """A short, stable id for a public key: the first 16 hex digits of sha256 over its raw bytes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_signing_key(private_path: Path, public_path: Path) -> str:
    """Create an Ed25519 key pair as PEM files (private key mode 0600); returns the key id."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    private_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub = key.public_key()
    public_path.write_bytes(
        pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return key_id(pub)


def load_private_key(path: Path) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SignatureError(f"{path}: not a readable PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError(f"{path}: not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise SignatureError(f"{path}: not a readable PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SignatureError(f"{path}: not an Ed25519 public key")
    return key


def sign_manifest(manifest: Manifest, private_key: PrivateKey) -> Manifest:
    """Return a copy of ``manifest`` carrying an Ed25519 signature by ``private_key``."""
    sig = private_key.sign(canonical_bytes(manifest))
    spec = SignatureSpec(key_id=key_id(private_key.public_key()), value=base64.b64encode(sig).decode())
    return manifest.model_copy(update={"signature": spec})


def verify_manifest(manifest: Manifest, trusted: Mapping[str, PublicKey], *, source: str) -> str:
    """Check the signature against the trusted keys (by key id); returns the key id that signed."""
    spec = manifest.signature
    if spec is None:
        raise SignatureError(f"{source}: package {manifest.ref} is not signed")
    key = trusted.get(spec.key_id)
    if key is None:
        raise SignatureError(f"{source}: package {manifest.ref} is signed by key {spec.key_id}, which is not trusted")
    try:
        sig = base64.b64decode(spec.value, validate=True)
        key.verify(sig, canonical_bytes(manifest))
    except (binascii.Error, ValueError):
        raise SignatureError(f"{source}: signature of {manifest.ref} is not valid base64") from None
    except InvalidSignature:
        raise SignatureError(
            f"{source}: signature of {manifest.ref} by key {spec.key_id} does not verify (tampered?)"
        ) from None
    return spec.key_id
