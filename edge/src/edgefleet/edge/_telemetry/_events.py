"""The ``events`` sink: a pipeline's detections and analytics (zone, line and track events; zone and line
counts for the periodic telemetry) published through the agent's telemetry.

It is an entry of the SDK's ``sink`` kind like any application's, registered through the
``edgefleet.sinks`` entry point of this distribution (``edge/pyproject.toml``). The agent adds
``{type: events}`` to every pipeline whose config lists none while ``telemetry.events.detections`` is on
or the pipeline has analytics stages; a pipeline may list it itself. Filters and rate limits are the
agent's ``telemetry.events`` (one token bucket for the device's detection events, one per stream for
analytics events). It needs the agent's telemetry, offered to sinks as the ``telemetry`` service: a
pipeline run by ``edgefleet run`` that lists it is refused with that reason.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from edgefleet.sdk import Frame, Result, Sink, SinkConfig, SinkContext, SinkError, register_sink

__all__ = ["EventsSink", "EventsSinkConfig", "register"]

_log = logging.getLogger(__name__)


class EventsSinkConfig(SinkConfig):
    """``sinks: [{type: events}]``: detection and analytics events over MQTT (the agent's
    ``telemetry.events`` settings)."""

    type: Literal["events"] = "events"


class EventsSink(Sink):
    """Offers every result to the agent's telemetry (filtered, rate-limited, spooled there); a publishing
    problem is logged and never stops the pipeline."""

    def __init__(self, telemetry: Any, pipeline: str) -> None:
        self.telemetry = telemetry
        self.pipeline = pipeline

    def write(self, result: Result, frame: Frame) -> None:
        try:
            self.telemetry.on_result(self.pipeline, result)
        except Exception:
            _log.warning("pipeline %s: event not published", self.pipeline, exc_info=True)


def _build(config: EventsSinkConfig, ctx: SinkContext) -> Sink:
    telemetry = ctx.services.get("telemetry")
    if telemetry is None:
        raise SinkError(
            "the events sink publishes through the agent's telemetry: it runs under `edgefleet agent` "
            "with a telemetry: section"
        )
    return EventsSink(telemetry, ctx.pipeline)


def register() -> None:
    """The ``edgefleet.sinks`` entry point of edgefleet-edge."""
    register_sink("events", EventsSinkConfig, _build)
