"""Sealed secrets: only the device whose certificate key a value was sealed to opens it, and only as the
secret it was sealed as; the sealed bytes never contain the clear value."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from edgefleet.sdk._sealing import SealingError, public_key_pem, seal, unseal


def _key() -> tuple[bytes, bytes]:
    k = ec.generate_private_key(ec.SECP256R1())
    priv = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    pub = k.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return priv, pub


def test_only_the_device_it_was_sealed_to_opens_it() -> None:
    a_priv, a_pub = _key()
    b_priv, _ = _key()
    sealed = seal(a_pub, "dev-a", "cam1", b"admin:hunter2")
    assert b"hunter2" not in sealed and b"admin" not in sealed
    assert unseal(a_priv, "dev-a", "cam1", sealed) == b"admin:hunter2"
    with pytest.raises(SealingError, match="does not open with this device's key"):
        unseal(b_priv, "dev-a", "cam1", sealed)  # another device's key
    with pytest.raises(SealingError, match="does not open"):
        unseal(a_priv, "dev-b", "cam1", sealed)  # handed to another device id
    with pytest.raises(SealingError, match="does not open"):
        unseal(a_priv, "dev-a", "cam2", sealed)  # renamed to another camera's secret
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(SealingError, match="does not open"):
        unseal(a_priv, "dev-a", "cam1", tampered)
    with pytest.raises(SealingError, match="truncated"):
        unseal(a_priv, "dev-a", "cam1", sealed[:40])
    assert seal(a_pub, "dev-a", "cam1", b"x") != seal(a_pub, "dev-a", "cam1", b"x")  # fresh key and nonce


def test_bad_keys_and_values_are_clear_errors() -> None:
    _, pub = _key()
    with pytest.raises(SealingError, match="not a PEM"):
        public_key_pem(b"-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n")
    with pytest.raises(SealingError, match="empty"):
        seal(pub, "d", "n", b"")
    with pytest.raises(SealingError, match="at most"):
        seal(pub, "d", "n", b"x" * 5000)
