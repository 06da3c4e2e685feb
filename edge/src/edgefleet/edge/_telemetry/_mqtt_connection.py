"""How the agent reaches its MQTT broker: the address (the SDK kit's one parser, raising the agent's
:class:`BrokerUrlError`) and the credentials and TLS it puts on a paho client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgefleet.sdk.kit import BrokerAddress
from edgefleet.sdk.kit import parse_broker_url as _parse

from ._errors import BrokerUrlError

__all__ = ["BrokerAddress", "configure_client", "parse_broker_url"]


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
    return _parse(
        url,
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        username=username,
        password=password,
        error=BrokerUrlError,
    )


def configure_client(address: BrokerAddress, client: Any) -> None:
    """Credentials and TLS of ``address`` on a paho client."""
    if address.username is not None:
        client.username_pw_set(address.username, address.password)
    ctx = address.ssl_context()
    if ctx is not None:
        client.tls_set_context(ctx)
