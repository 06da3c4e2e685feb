"""Agent telemetry over MQTT 5: status (retained, Last Will), periodic telemetry, events; disk spool.

Example::

    from edgefleet.edge._telemetry import TelemetryAgent, TelemetryConfig

    config = TelemetryConfig(fleet="lab", device_id="cam-1", broker="mqtt://127.0.0.1:1883")
    with TelemetryAgent(config) as telemetry:
        telemetry.add_pipeline("default", pipeline.stats)
        ...

Topics and payloads: docs/telemetry.md.
"""

from __future__ import annotations

from ._config import EventsConfig, TelemetryConfig
from ._delivery import Delivery
from ._errors import BrokerUrlError, SpoolError, TelemetryError
from ._logging import JsonLinesFormatter
from ._messages import Encoding, Identity, ModelInUse, topic
from ._mqtt_connection import BrokerAddress, parse_broker_url
from ._prometheus import MetricsServer, TelemetryCollector
from ._publisher import ConnectionState, MqttPublisher, PublisherStats
from ._sampler import SystemSampler, detect_gpu_source
from ._spool import Priority, Spool, SpoolStats
from ._stats import pipeline_message
from ._tegrastats import TegraStats, parse_tegrastats
from ._telemetry_agent import SwapPhase, TelemetryAgent, TokenBucket

__all__ = [
    "BrokerAddress",
    "BrokerUrlError",
    "ConnectionState",
    "Delivery",
    "Encoding",
    "EventsConfig",
    "Identity",
    "JsonLinesFormatter",
    "MetricsServer",
    "ModelInUse",
    "MqttPublisher",
    "Priority",
    "PublisherStats",
    "Spool",
    "SpoolError",
    "SpoolStats",
    "SwapPhase",
    "SystemSampler",
    "TegraStats",
    "TelemetryAgent",
    "TelemetryCollector",
    "TelemetryConfig",
    "TelemetryError",
    "TokenBucket",
    "detect_gpu_source",
    "parse_broker_url",
    "parse_tegrastats",
    "pipeline_message",
    "topic",
]
