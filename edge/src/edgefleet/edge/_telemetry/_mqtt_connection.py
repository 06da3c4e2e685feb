"""Broker addresses: ``mqtt://[user[:password]@]host[:1883]`` and ``mqtts://...:8883`` with TLS files."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from edgefleet.sdk._tls import client_context

from ._errors import BrokerUrlError

__all__ = ["BrokerAddress", "parse_broker_url"]

_DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}


@dataclass(frozen=True)
class BrokerAddress:
    """Where and how to reach the MQTT broker. ``repr`` never shows the password."""

    host: str
    port: int
    tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    @property
    def redacted_url(self) -> str:
        user = f"{self.username}:***@" if self.username else ""
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{self.host}:{self.port}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context (server verified against ``ca_file`` or the system store), or None."""
        return client_context(self.ca_file, self.cert_file, self.key_file) if self.tls else None


def parse_broker_url(
    url: str,
    *,
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
    username: str | None = None,
    password: str | None = None,
) -> BrokerAddress:
    """Parse ``mqtt://host:1883`` or ``mqtts://user:pass@host:8883``; explicit arguments win over the URL.

    >>> parse_broker_url("mqtt://127.0.0.1").port
    1883
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise BrokerUrlError(f"broker URL must start with mqtt:// or mqtts://, got {parts.scheme or url!r}")
    if not parts.hostname:
        raise BrokerUrlError("broker URL has no host")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError as exc:
        raise BrokerUrlError(f"broker URL has an invalid port: {exc}") from None
    tls = scheme == "mqtts"
    files = {"ca_file": ca_file, "cert_file": cert_file, "key_file": key_file}
    paths: dict[str, Path | None] = {}
    for name, value in files.items():
        if value is None:
            paths[name] = None
            continue
        if not tls:
            raise BrokerUrlError(f"{name} given for a plain mqtt:// broker; use mqtts://")
        path = Path(value)
        if not path.is_file():
            raise BrokerUrlError(f"{name} {path} does not exist")
        paths[name] = path
    if paths["key_file"] is not None and paths["cert_file"] is None:
        raise BrokerUrlError("key_file given without cert_file")
    user = username if username is not None else (unquote(parts.username) if parts.username else None)
    secret = password if password is not None else (unquote(parts.password) if parts.password else None)
    address = BrokerAddress(
        host=parts.hostname,
        port=port,
        tls=tls,
        username=user,
        password=secret,
        ca_file=paths["ca_file"],
        cert_file=paths["cert_file"],
        key_file=paths["key_file"],
    )
    try:  # read the TLS files now: at connect time, in the publisher's thread, a bad one would go unseen
        address.ssl_context()
    except (ssl.SSLError, OSError) as exc:
        names = ", ".join(f"{k} {v}" for k, v in paths.items() if v is not None) or "the system CA store"
        raise BrokerUrlError(f"TLS files not usable ({names}): {getattr(exc, 'reason', None) or exc}") from None
    return address
