"""How the agent reaches its MQTT broker: the address, from the SDK kit's one parser (shared with the
controller) raising the agent's :class:`BrokerUrlError`; ``BrokerAddress.configure`` puts its credentials
and TLS on the paho client."""

from __future__ import annotations

from pathlib import Path

from edgefleet.sdk.kit import BrokerAddress
from edgefleet.sdk.kit import parse_broker_url as _parse

from ._errors import BrokerUrlError

__all__ = ["BrokerAddress", "parse_broker_url"]


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
