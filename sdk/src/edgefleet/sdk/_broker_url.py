"""MQTT broker addresses, the one parser the agent and the controller share (through ``edgefleet.sdk.kit``):
``mqtt://[user[:password]@]host[:1883]`` and ``mqtts://...[:8883]`` with TLS files.

Each member raises its own error class (``error=``): the agent's ``BrokerUrlError``, the controller's
``TelemetryIngestError``; both derive from :class:`~edgefleet.sdk.EdgefleetError`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from ._errors import ConfigError
from ._tls import client_context

__all__ = ["BrokerAddress", "parse_broker_url"]

_DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}


class MqttClient(Protocol):
    """What :meth:`BrokerAddress.configure` needs of an MQTT client (paho-mqtt's ``Client`` has it)."""

    def username_pw_set(self, username: str | None, password: str | None = None) -> None: ...

    def tls_set_context(self, context: ssl.SSLContext | None = None) -> None: ...


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

    def configure(self, client: MqttClient) -> None:
        """Put the credentials and TLS on an MQTT client (paho's), before it connects."""
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
    username: str | None = None,
    password: str | None = None,
    error: type[Exception] = ConfigError,
) -> BrokerAddress:
    """Parse ``mqtt://host:1883`` or ``mqtts://user:pass@host:8883``; explicit arguments win over the URL.
    TLS files only with ``mqtts``; they are read here, so a bad one fails now and not at connect time in
    the MQTT client's thread. A problem raises ``error`` (one line).

    >>> parse_broker_url("mqtt://127.0.0.1").port
    1883
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise error(f"broker URL must start with mqtt:// or mqtts://, got {parts.scheme or url!r}")
    if not parts.hostname:
        raise error("broker URL has no host")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError as exc:
        raise error(f"broker URL has an invalid port: {exc}") from None
    tls = scheme == "mqtts"
    files = {"ca_file": ca_file, "cert_file": cert_file, "key_file": key_file}
    paths: dict[str, Path | None] = {}
    for name, value in files.items():
        if value is None:
            paths[name] = None
            continue
        if not tls:
            raise error(f"{name} given for a plain mqtt:// broker; use mqtts://")
        path = Path(value)
        if not path.is_file():
            raise error(f"{name} {path} does not exist")
        paths[name] = path
    if paths["key_file"] is not None and paths["cert_file"] is None:
        raise error("key_file given without cert_file")
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
    try:
        address.ssl_context()
    except (ssl.SSLError, OSError) as exc:
        names = ", ".join(f"{k} {v}" for k, v in paths.items() if v is not None) or "the system CA store"
        raise error(f"TLS files not usable ({names}): {getattr(exc, 'reason', None) or exc}") from None
    return address
