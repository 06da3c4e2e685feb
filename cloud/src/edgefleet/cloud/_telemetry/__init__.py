"""Controller-side telemetry: MQTT 5 ingestion (shared subscription), storage, health for rollout gates.

Example::

    from datetime import timedelta
    from sqlalchemy import create_engine
    from edgefleet.cloud._telemetry import Ingester, TelemetryStore, parse_broker_url

    store = TelemetryStore(create_engine("sqlite:///controller.db"))
    with Ingester(parse_broker_url("mqtt://127.0.0.1:1883"), store):
        print(store.health("cam-1", timedelta(minutes=5)))

Topics and payloads: docs/telemetry.md.
"""

from __future__ import annotations

from ._errors import TelemetryIngestError
from ._ingest import Ingester, IngesterState, IngestStats
from ._mqtt_connection import BrokerAddress, parse_broker_url
from ._schema import create_tables, telemetry_metadata
from ._telemetry_store import DeviceHealth, DeviceState, TelemetryStore, WriteResult, since_epoch
from ._validate import Parsed, Rejected, parse_message

__all__ = [
    "BrokerAddress",
    "DeviceHealth",
    "DeviceState",
    "IngestStats",
    "Ingester",
    "IngesterState",
    "Parsed",
    "Rejected",
    "TelemetryIngestError",
    "TelemetryStore",
    "WriteResult",
    "create_tables",
    "parse_broker_url",
    "parse_message",
    "since_epoch",
    "telemetry_metadata",
]
