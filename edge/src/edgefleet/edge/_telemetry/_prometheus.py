"""Prometheus ``/metrics``: the same figures as the latest ``Telemetry`` message, plus publisher state."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from edgefleet.proto.v1 import telemetry_pb2 as pb

__all__ = ["MetricsServer", "TelemetryCollector"]

_log = logging.getLogger(__name__)
_Q = (("0.5", "p50_ms"), ("0.95", "p95_ms"), ("0.99", "p99_ms"))


class TelemetryCollector(Collector):
    """Collects from ``latest()`` (the most recent Telemetry message, or None) at scrape time."""

    def __init__(self, latest: Callable[[], pb.Telemetry | None], extra: Callable[[], dict[str, float]]) -> None:
        self._latest = latest
        self._extra = extra

    def collect(self) -> Iterator[Any]:
        msg = self._latest()
        yield from self._publisher_metrics()
        if msg is None:
            return
        yield from _pipeline_metrics(msg)
        yield from _analytics_metrics(msg)
        yield from _quality_metrics(msg)
        yield from _system_metrics(msg.system)

    def _publisher_metrics(self) -> Iterator[Any]:
        for name, value in sorted(self._extra().items()):
            if name.endswith("_total"):
                c = CounterMetricFamily(f"edgefleet_telemetry_{name[:-6]}", f"telemetry publisher: {name}")
                c.add_metric([], value)
                yield c
            else:
                g = GaugeMetricFamily(f"edgefleet_telemetry_{name}", f"telemetry publisher: {name}")
                g.add_metric([], value)
                yield g


def _pipeline_metrics(msg: pb.Telemetry) -> Iterator[Any]:
    fps = GaugeMetricFamily("edgefleet_pipeline_fps", "results per second", labels=["pipeline"])
    model = InfoMetricFamily("edgefleet_model", "model version serving", labels=["pipeline"])
    queue = GaugeMetricFamily("edgefleet_queue_depth", "items waiting", labels=["pipeline", "queue"])
    copies = CounterMetricFamily("edgefleet_pixel_copies", "frame pixel copies", labels=["pipeline", "kind"])
    stage_lat = GaugeMetricFamily(
        "edgefleet_stage_latency_ms", "per-item stage latency", labels=["pipeline", "stage", "quantile"]
    )
    s_fps = GaugeMetricFamily("edgefleet_stream_fps", "results per second", labels=["pipeline", "stream"])
    s_lat = GaugeMetricFamily(
        "edgefleet_stream_latency_ms", "capture-to-result latency", labels=["pipeline", "stream", "quantile"]
    )
    counters = {
        name: CounterMetricFamily(f"edgefleet_stream_{name}", f"stream {name}", labels=["pipeline", "stream"])
        for name in ("frames", "results", "dropped", "reconnects", "errors")
    }
    for p in msg.pipelines:
        fps.add_metric([p.name], p.fps)
        if p.model_version:
            name, _, version = p.model_version.rpartition(":")
            model.add_metric([p.name], {"model": name or p.model_version, "version": version})
        for q, depth in sorted(p.queue_depths.items()):
            queue.add_metric([p.name, q], depth)
        for kind, n in sorted(p.pixel_copies.items()):
            copies.add_metric([p.name, kind], n)
        for st in p.stages:
            for q, field in _Q:
                stage_lat.add_metric([p.name, st.name, q], getattr(st.latency, field))
        for s in p.streams:
            s_fps.add_metric([p.name, s.stream_id], s.fps)
            for q, field in _Q:
                s_lat.add_metric([p.name, s.stream_id, q], getattr(s.latency, field))
            values = {
                "frames": s.frames_in,
                "results": s.results,
                "dropped": s.dropped,
                "reconnects": s.reconnects,
                "errors": s.errors,
            }
            for name, value in values.items():
                counters[name].add_metric([p.name, s.stream_id], value)
    yield from (fps, model, queue, copies, stage_lat, s_fps, s_lat, *counters.values())


def _analytics_metrics(msg: pb.Telemetry) -> Iterator[Any]:
    """Zones' and lines' counts by class (labels per region bounded by the agent: ``region_labels``) and
    the analytics stages' counters."""
    where = ["pipeline", "stream", "zone", "class"]
    inside = GaugeMetricFamily("edgefleet_zone_objects", "tracked objects inside a zone now", labels=where)
    moves = CounterMetricFamily(
        "edgefleet_zone_transitions", "objects entering (in) and leaving (out) a zone", labels=[*where, "direction"]
    )
    lines = CounterMetricFamily(
        "edgefleet_line_crossings",
        "objects crossing a line, by direction",
        labels=["pipeline", "stream", "line", "class", "direction"],
    )
    stages = GaugeMetricFamily(
        "edgefleet_analytics_value", "an analytics stage's counter", labels=["pipeline", "stage", "name"]
    )
    for p in msg.pipelines:
        for r in p.regions:
            key = [p.name, r.stream_id, r.name, r.label]
            if r.kind == "zone":
                inside.add_metric(key, r.inside)
                moves.add_metric([*key, "in"], r.in_total)
                moves.add_metric([*key, "out"], r.out_total)
            else:
                lines.add_metric([*key, "in"], r.in_total)
                lines.add_metric([*key, "out"], r.out_total)
        for st in p.analytics:
            for name, value in sorted(st.values.items()):
                stages.add_metric([p.name, st.stage, name], value)
    yield from (inside, moves, lines, stages)


def _quality_metrics(msg: pb.Telemetry) -> Iterator[Any]:
    """Per-version quality KPIs (the serving version and the one before it), labelled by ``model``."""
    where = ["pipeline", "model"]
    frames = CounterMetricFamily("edgefleet_model_frames", "frames a model version served", labels=where)
    dpf = GaugeMetricFamily("edgefleet_model_detections_per_frame", "mean detections per frame", labels=where)
    empty = GaugeMetricFamily("edgefleet_model_empty_frame_ratio", "share of frames without detections", labels=where)
    conf = GaugeMetricFamily("edgefleet_model_confidence", "detection score quantiles", labels=[*where, "quantile"])
    mix = GaugeMetricFamily("edgefleet_model_class_share", "share of detections per class", labels=[*where, "class"])
    churn = GaugeMetricFamily(
        "edgefleet_model_track_churn_per_frame", "tracks started (new) and ended per frame", labels=[*where, "kind"]
    )
    for p in msg.pipelines:
        for q in p.quality:
            key = [p.name, q.model_ref]
            frames.add_metric(key, q.frames)
            dpf.add_metric(key, q.detections_per_frame)
            empty.add_metric(key, q.empty_frame_ratio)
            for quantile, value in (("0.1", q.confidence_p10), ("0.5", q.confidence_p50), ("0.9", q.confidence_p90)):
                conf.add_metric([*key, quantile], value)
            for label, share in sorted(q.class_mix.items()):
                mix.add_metric([*key, label], share)
            churn.add_metric([*key, "new"], q.new_tracks_per_frame)
            churn.add_metric([*key, "ended"], q.ended_tracks_per_frame)
    yield from (frames, dpf, empty, conf, mix, churn)


def _system_metrics(sys_msg: pb.Telemetry.System) -> Iterator[Any]:
    for name, help_text, value in (
        ("cpu_percent", "CPU utilisation, all cores", sys_msg.cpu_pct),
        ("ram_used_bytes", "RAM in use", sys_msg.ram_used_bytes),
        ("ram_total_bytes", "RAM installed", sys_msg.ram_total_bytes),
        ("disk_used_bytes", "disk in use (spool filesystem)", sys_msg.disk_used_bytes),
        ("disk_total_bytes", "disk size (spool filesystem)", sys_msg.disk_total_bytes),
    ):
        g = GaugeMetricFamily(f"edgefleet_system_{name}", help_text)
        g.add_metric([], float(value))
        yield g
    gpu_fields = (
        ("utilization_percent", "utilization_pct"),
        ("memory_used_bytes", "memory_used_bytes"),
        ("memory_total_bytes", "memory_total_bytes"),
        ("temperature_celsius", "temperature_c"),
        ("power_watts", "power_w"),
    )
    for metric, field in gpu_fields:
        g = GaugeMetricFamily(f"edgefleet_gpu_{metric}", f"GPU {metric}", labels=["gpu", "name"])
        for gpu in sys_msg.gpus:
            g.add_metric([str(gpu.index), gpu.name], float(getattr(gpu, field)))
        yield g
    temps = GaugeMetricFamily("edgefleet_sensor_temperature_celsius", "named sensors", labels=["sensor"])
    for k, v in sorted(sys_msg.temperatures_c.items()):
        temps.add_metric([k], v)
    rails = GaugeMetricFamily("edgefleet_rail_power_watts", "named power rails", labels=["rail"])
    for k, v in sorted(sys_msg.power_w.items()):
        rails.add_metric([k], v)
    yield from (temps, rails)


class MetricsServer:
    """Serves a private registry on ``http://addr:port/metrics`` from a daemon thread."""

    def __init__(self, collector: Collector, port: int, addr: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._port = port
        self._addr = addr
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_port) if self._server is not None else self._port

    def start(self) -> None:
        try:
            self._server, self._thread = start_http_server(self._port, self._addr, registry=self.registry)
        except OSError as exc:
            raise OSError(exc.errno, f"prometheus_port {self._addr}:{self._port}: {exc.strerror}") from None
        _log.info("Prometheus metrics on http://%s:%d/metrics", self._addr, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
