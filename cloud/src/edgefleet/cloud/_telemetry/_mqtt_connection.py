"""Broker URLs for the controller side: ``mqtt://[user[:pass]@]host[:1883]``, ``mqtts://...[:8883]``.

(The agent has its own copy: edge and cloud never import each other.)
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as mqtt

from edgefleet.sdk._tls import client_context

from ._errors import TelemetryIngestError

__all__ = ["BrokerAddress", "parse_broker_url"]

_DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}


@dataclass(frozen=True)
class BrokerAddress:
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
        return client_context(self.ca_file, self.cert_file, self.key_file) if self.tls else None

    def configure(self, client: mqtt.Client) -> None:
        """Credentials and TLS on a paho client."""
        if self.username is not None:
            client.username_pw_set(self.username, self.password)
        ctx = self.ssl_context()
        if ctx is not None:
            client.tls_set_context(ctx)


def parse_broker_url(
    url: str,
    *,
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> BrokerAddress:
    """``mqtt://host:1883`` or ``mqtts://user:pass@host:8883`` (TLS files only with mqtts)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise TelemetryIngestError(f"broker URL must look like mqtt://host:1883 or mqtts://host:8883, got {url!r}")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError as exc:
        raise TelemetryIngestError(f"broker URL has an invalid port: {exc}") from None
    tls = scheme == "mqtts"
    paths: list[Path | None] = []
    for name, value in (("ca_file", ca_file), ("cert_file", cert_file), ("key_file", key_file)):
        if value is not None and not tls:
            raise TelemetryIngestError(f"{name} given for a plain mqtt:// broker; use mqtts://")
        if value is not None and not Path(value).is_file():
            raise TelemetryIngestError(f"{name} {value} does not exist")
        paths.append(Path(value) if value is not None else None)
    if paths[2] is not None and paths[1] is None:
        raise TelemetryIngestError("key_file given without cert_file")
    address = BrokerAddress(
        host=parts.hostname,
        port=port,
        tls=tls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        ca_file=paths[0],
        cert_file=paths[1],
        key_file=paths[2],
    )
    try:  # read the TLS files now, not in paho's thread at connect time
        address.ssl_context()
    except (ssl.SSLError, OSError) as exc:
        names = ", ".join(str(x) for x in paths if x is not None) or "the system CA store"
        raise TelemetryIngestError(f"TLS files not usable ({names}): {getattr(exc, 'reason', None) or exc}") from None
    return address
