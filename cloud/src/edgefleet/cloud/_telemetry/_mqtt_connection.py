"""How the controller reaches the MQTT broker: the address, from the SDK kit's one parser (shared with the
agent) raising :class:`TelemetryIngestError`; ``BrokerAddress.configure`` puts its credentials and TLS on
the paho client."""

from __future__ import annotations

from pathlib import Path

from edgefleet.sdk.kit import BrokerAddress
from edgefleet.sdk.kit import parse_broker_url as _parse

from ._errors import TelemetryIngestError

__all__ = ["BrokerAddress", "parse_broker_url"]


def parse_broker_url(
    url: str,
    *,
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> BrokerAddress:
    """``mqtt://host:1883`` or ``mqtts://user:pass@host:8883`` (TLS files only with mqtts)."""
    return _parse(url, ca_file=ca_file, cert_file=cert_file, key_file=key_file, error=TelemetryIngestError)
