"""Prometheus ``/metrics`` on the agent: the figures of the latest ``Telemetry`` message, latency histograms
read from the running pipelines at scrape time, each camera's state, build and device info, and the
publisher's state. Prometheus conventions (checked by ``promtool check metrics`` in the tests): base units
(seconds, bytes, ratios 0..1), histograms for latencies, ``_total`` counters, bounded labels (pipeline,
stream, stage, and the fixed sets of camera states and reasons)."""

from __future__ import annotations

import logging
import platform
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.registry import Collector

from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk import CameraState, HealthReason, PipelineStats, redact_uri

__all__ = ["MetricsServer", "TelemetryCollector"]

_log = logging.getLogger(__name__)
_STATES = tuple(s.value for s in CameraState)
_REASONS = tuple(r.value for r in HealthReason)


class TelemetryCollector(Collector):
    """Collects from ``latest()`` (the most recent Telemetry message, or None) at scrape time, with the
    latency histograms of ``pipelines()`` (name -> ``Pipeline.stats()``) and ``info()`` (device, fleet,
    agent version, soc, gpu) for ``edgefleet_device_info``."""

    def __init__(
        self,
        latest: Callable[[], pb.Telemetry | None],
        extra: Callable[[], dict[str, float]],
        *,
        pipelines: Callable[[], Mapping[str, PipelineStats]] | None = None,
        info: Callable[[], dict[str, str]] | None = None,
        version: str = "",
    ) -> None:
        self._latest = latest
        self._extra = extra
        self._pipelines = pipelines
        self._info = info
        self._version = version

    def collect(self) -> Iterator[Any]:
        yield from self._info_metrics()
        msg = self._latest()
        yield from self._publisher_metrics()
        if self._pipelines is not None:
            yield from _histograms(self._pipelines())
        if msg is None:
            return
        yield from _pipeline_metrics(msg)
        yield from _analytics_metrics(msg)
        yield from _quality_metrics(msg)
        yield from _system_metrics(msg.system)

    def _info_metrics(self) -> Iterator[Any]:
        build = GaugeMetricFamily(
            "edgefleet_build_info", "the agent's build: 1", labels=["component", "version", "python"]
        )
        build.add_metric(["agent", self._version, platform.python_version()], 1.0)
        yield build
        if self._info is not None:
            info = self._info()
            keys = ("device", "fleet", "agent_version", "soc", "gpu")
            device = GaugeMetricFamily("edgefleet_device_info", "the device this agent runs on: 1", labels=list(keys))
            device.add_metric([info.get(k, "") for k in keys], 1.0)
            yield device

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


def _buckets(hist: Any) -> list[tuple[str, float]]:
    out = [(f"{b:g}", float(n)) for b, n in zip(hist.bounds, hist.counts, strict=True)]
    out.append(("+Inf", float(hist.count)))
    return out


def _histograms(pipelines: Mapping[str, PipelineStats]) -> Iterator[Any]:
    stage = HistogramMetricFamily(
        "edgefleet_stage_latency_seconds", "latency of one pipeline stage, per call", labels=["pipeline", "stage"]
    )
    stream = HistogramMetricFamily(
        "edgefleet_stream_latency_seconds", "capture-to-result latency per frame", labels=["pipeline", "stream"]
    )
    for name, stats in sorted(pipelines.items()):
        for st in stats.stages.values():
            if st.histogram is not None:
                stage.add_metric([name, st.name], _buckets(st.histogram), st.histogram.sum)
        for s in stats.streams.values():
            if s.latency_histogram is not None:
                h = s.latency_histogram
                stream.add_metric([name, redact_uri(s.stream_id)], _buckets(h), h.sum)
    yield from (stage, stream)


def _pipeline_metrics(msg: pb.Telemetry) -> Iterator[Any]:
    fps = GaugeMetricFamily("edgefleet_pipeline_fps", "results per second", labels=["pipeline"])
    model = InfoMetricFamily("edgefleet_model", "model version serving", labels=["pipeline"])
    queue = GaugeMetricFamily("edgefleet_queue_depth", "items waiting", labels=["pipeline", "queue"])
    copies = CounterMetricFamily("edgefleet_pixel_copies", "frame pixel copies", labels=["pipeline", "kind"])
    s_fps = GaugeMetricFamily("edgefleet_stream_fps", "results per second", labels=["pipeline", "stream"])
    where = ["pipeline", "stream"]
    state = GaugeMetricFamily(
        "edgefleet_stream_state", "1 for the camera's state now, 0 for the others", labels=[*where, "state"]
    )
    reason = GaugeMetricFamily(
        "edgefleet_stream_reason",
        "1 for why the camera is not streaming now, 0 for the others",
        labels=[*where, "reason"],
    )
    up = GaugeMetricFamily("edgefleet_stream_up", "1 while the camera streams, 0 otherwise", labels=where)
    in_state = GaugeMetricFamily("edgefleet_stream_state_seconds", "time in the current state", labels=where)
    outage = CounterMetricFamily("edgefleet_stream_outage_seconds", "time spent without the stream", labels=where)
    counters = {
        name: CounterMetricFamily(f"edgefleet_stream_{name}", f"stream {name}", labels=where)
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
        for s in p.streams:
            key = [p.name, s.stream_id]
            s_fps.add_metric(key, s.fps)
            for value in _STATES:
                state.add_metric([*key, value], float(s.state == value))
            for value in _REASONS:
                reason.add_metric([*key, value], float(s.state_reason == value))
            up.add_metric(key, float(s.state == CameraState.STREAMING.value))
            in_state.add_metric(key, s.state_seconds)
            outage.add_metric(key, s.outage_seconds)
            values = {
                "frames": s.frames_in,
                "results": s.results,
                "dropped": s.dropped,
                "reconnects": s.reconnects,
                "errors": s.errors,
            }
            for name, value in values.items():
                counters[name].add_metric(key, value)
    yield from (fps, model, queue, copies, s_fps, state, reason, up, in_state, outage, *counters.values())


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
    # a gauge per quantile level `q` (a `quantile` label belongs to summaries only; promtool checks this)
    conf = GaugeMetricFamily(
        "edgefleet_model_confidence_quantile", "detection score quantiles over the window", labels=[*where, "q"]
    )
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
        ("cpu_ratio", "CPU utilisation, all cores (0..1)", sys_msg.cpu_pct / 100.0),
        ("ram_used_bytes", "RAM in use", sys_msg.ram_used_bytes),
        ("ram_total_bytes", "RAM installed", sys_msg.ram_total_bytes),
        ("disk_used_bytes", "disk in use (spool filesystem)", sys_msg.disk_used_bytes),
        ("disk_total_bytes", "disk size (spool filesystem)", sys_msg.disk_total_bytes),
    ):
        g = GaugeMetricFamily(f"edgefleet_system_{name}", help_text)
        g.add_metric([], float(value))
        yield g
    gpu_fields = (
        ("utilization_ratio", "utilization_pct"),
        ("memory_used_bytes", "memory_used_bytes"),
        ("memory_total_bytes", "memory_total_bytes"),
        ("temperature_celsius", "temperature_c"),
        ("power_watts", "power_w"),
    )
    for metric, field in gpu_fields:
        g = GaugeMetricFamily(f"edgefleet_gpu_{metric}", f"GPU {metric}", labels=["gpu", "name"])
        scale = 0.01 if field.endswith("_pct") else 1.0  # ratios 0..1, not percentages
        for gpu in sys_msg.gpus:
            g.add_metric([str(gpu.index), gpu.name], float(getattr(gpu, field)) * scale)
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
