"""How the controller reaches the MQTT broker: the address (the SDK kit's one parser, shared with the
agent, raising :class:`TelemetryIngestError`) and the credentials and TLS it puts on a paho client."""

from __future__ import annotations

from pathlib import Path

import paho.mqtt.client as mqtt

from edgefleet.sdk.kit import BrokerAddress
from edgefleet.sdk.kit import parse_broker_url as _parse

from ._errors import TelemetryIngestError

__all__ = ["BrokerAddress", "configure_client", "parse_broker_url"]


def parse_broker_url(
    url: str,
    *,
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> BrokerAddress:
    """``mqtt://host:1883`` or ``mqtts://user:pass@host:8883`` (TLS files only with mqtts)."""
    return _parse(url, ca_file=ca_file, cert_file=cert_file, key_file=key_file, error=TelemetryIngestError)


def configure_client(address: BrokerAddress, client: mqtt.Client) -> None:
    """Credentials and TLS of ``address`` on a paho client."""
    if address.username is not None:
        client.username_pw_set(address.username, address.password)
    ctx = address.ssl_context()
    if ctx is not None:
        client.tls_set_context(ctx)
