"""The controller's Prometheus ``/metrics`` (``controller serve --metrics-listen host:port``): telemetry
ingest counters read from the ingester at scrape time, following Prometheus conventions (``_total``
counters, seconds). Minimal on purpose; the agent has its own (edge ``_prometheus``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ._errors import CloudError
from ._telemetry import IngesterState, IngestStats

__all__ = ["REJECTION_REASONS", "IngestCollector", "serve_metrics"]

_log = logging.getLogger(__name__)

# Every reason a message can be rejected for, exported at 0 too so rate() sees a counter from the start.
REJECTION_REASONS = (
    "topic",
    "not_a_device",
    "oversized",
    "malformed",
    "schema",
    "wrong_device",
    "rate_limited",
    "internal",
)


class IngestCollector(Collector):
    """``edgefleet_telemetry_*`` from ``stats()`` (None: this controller does not ingest)."""

    def __init__(self, stats: Callable[[], IngestStats | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        s = self._stats()
        if s is None:
            return
        for name, value, doc in (
            ("received", s.received, "MQTT messages received on the ingest subscription"),
            ("stored", s.stored, "messages stored (first copies)"),
            ("duplicates", s.duplicates, "copies of messages already stored"),
            ("store_errors", s.store_errors, "batches that could not be stored (the broker sends them again)"),
            ("batches", s.batches, "batches committed"),
            ("acks_published", s.acks_published, "acknowledgement watermarks published to devices"),
        ):
            c = CounterMetricFamily(f"edgefleet_telemetry_{name}", doc)
            c.add_metric([], float(value))
            yield c
        rejected = CounterMetricFamily(
            "edgefleet_telemetry_rejected", "messages rejected, by reason", labels=["reason"]
        )
        for reason in sorted({*REJECTION_REASONS, *s.rejected}):
            rejected.add_metric([reason], float(s.rejected.get(reason, 0)))
        yield rejected
        cpu = CounterMetricFamily(
            "edgefleet_telemetry_ingest_cpu_seconds", "writer-thread CPU time by stage", labels=["stage"]
        )
        for stage, seconds in sorted(s.cpu_s.items()):
            cpu.add_metric([stage], seconds)
        yield cpu
        depth = GaugeMetricFamily("edgefleet_telemetry_ingest_queue_depth", "messages received, not yet stored")
        depth.add_metric([], float(s.queue_depth))
        yield depth
        up = GaugeMetricFamily("edgefleet_telemetry_ingest_subscribed", "1 while the ingest subscription is on")
        up.add_metric([], 1.0 if s.state is IngesterState.SUBSCRIBED else 0.0)
        yield up


def serve_metrics(
    collector: Collector, listen: str, registry: CollectorRegistry | None = None, *more: Collector
) -> Callable[[], None]:
    """Serve ``collector`` (and ``more``, and whatever ``registry`` already holds) on
    ``http://host:port/metrics`` from a daemon thread; returns the stopper."""
    host, _, port = listen.rpartition(":")
    registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    for c in (collector, *more):
        registry.register(c)
    try:
        server, thread = start_http_server(int(port), host.strip("[]") or "127.0.0.1", registry=registry)
    except OSError as exc:
        raise CloudError(f"cannot serve metrics on {listen}: {exc.strerror}") from None
    _log.info("Prometheus metrics on http://%s:%d/metrics", host, server.server_port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=2.0)

    return stop
