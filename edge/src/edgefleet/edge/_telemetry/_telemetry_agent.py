"""The agent's telemetry: one object the agent starts and stops, fed by pipelines and lifecycle events."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk import PipelineStats, Result

from ._analytics import AnalyticsFeed
from ._bucket import TokenBucket
from ._config import TelemetryConfig
from ._messages import Encoding, Identity, ModelInUse
from ._prometheus import MetricsServer, TelemetryCollector
from ._publisher import ConnectionState, MqttPublisher
from ._sampler import GpuSource, SystemSampler, detect_gpu_source
from ._spool import Priority, Spool
from ._stats import pipeline_message

__all__ = ["SwapPhase", "TelemetryAgent", "TokenBucket"]

_log = logging.getLogger(__name__)

SwapPhase = pb.Event.Swap.Phase


class TelemetryAgent:
    """Publishes status, periodic telemetry and events for one device.

    Example::

        agent = TelemetryAgent(TelemetryConfig(fleet="lab", device_id="cam-1", broker="mqtt://127.0.0.1"))
        agent.add_pipeline("default", pipeline.stats)
        agent.start()
        ...
        agent.swap("default", SwapPhase.PHASE_SUCCEEDED, "det:1.0.0", "det:1.1.0")
        agent.stop()
    """

    def __init__(
        self,
        config: TelemetryConfig,
        *,
        agent_version: str = "",
        labels: dict[str, str] | None = None,
        gpu_source: GpuSource | str | None = "config",
    ) -> None:
        self.config = config
        self.identity = Identity(config.fleet, config.device_id, agent_version, dict(labels or {}))
        self._pipelines: dict[str, Callable[[], PipelineStats]] = {}
        self._models: dict[str, str] = {}
        self._lock = threading.Lock()
        self._gpu_choice = gpu_source
        self._bucket = TokenBucket(config.events.max_per_s, config.events.burst)
        self._suppressed = 0
        self.analytics = AnalyticsFeed(config.events.analytics, config.region_labels)
        self._latest: pb.Telemetry | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stack = contextlib.ExitStack()
        self.spool: Spool | None = None
        self.publisher: MqttPublisher | None = None
        self.metrics: MetricsServer | None = None
        self._sampler: SystemSampler | None = None

    # --- sources -----------------------------------------------------------------------------------
    def add_pipeline(self, name: str, stats: Callable[[], PipelineStats]) -> None:
        """Report ``stats()`` (usually ``Pipeline.stats``) as pipeline ``name`` in every message."""
        with self._lock:
            self._pipelines[name] = stats

    def remove_pipeline(self, name: str) -> None:
        with self._lock:
            self._pipelines.pop(name, None)
            self._models.pop(name, None)
        self.analytics.forget(name)

    def models(self) -> list[ModelInUse]:
        with self._lock:
            return [ModelInUse.from_ref(p, ref) for p, ref in sorted(self._models.items())]

    # --- lifecycle (shutdown mirrors start-up through the ExitStack) -------------------------------
    def start(self) -> None:
        cfg = self.config
        try:
            spool = Spool(cfg.spool_path, max_entries=cfg.spool_max_entries, max_bytes=cfg.spool_max_bytes)
            self._stack.callback(spool.close)
            self.spool = spool
            gpu = self._gpu()
            self._sampler = SystemSampler(gpu, disk_path=cfg.spool_path.resolve().parent)
            self._stack.callback(self._sampler.close)
            pub = MqttPublisher(
                cfg.broker_address(),
                self.identity,
                spool,
                encoding=Encoding(cfg.encoding),
                keepalive_s=cfg.keepalive_s,
                connect_timeout_s=cfg.connect_timeout_s,
                window=cfg.inflight_window,
                models=self.models,
                delivery=cfg.delivery,
                ack_timeout_s=cfg.ack_timeout_s,
            )
            pub.start()
            self._stack.callback(pub.stop, 5.0)
            self.publisher = pub
            if cfg.prometheus_port is not None:
                self.metrics = MetricsServer(
                    TelemetryCollector(
                        self.latest,
                        self._publisher_figures,
                        pipelines=self._live_stats,
                        info=self._device_info,
                        version=self.identity.agent_version,
                    ),
                    cfg.prometheus_port,
                    cfg.prometheus_addr,
                )
                self.metrics.start()
                self._stack.callback(self.metrics.stop)
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="edgefleet-telemetry", daemon=True)
            self._thread.start()
            self._stack.callback(self._join)
        except BaseException:
            self._stack.close()
            raise

    def stop(self) -> None:
        """Stop sampling, publish OFFLINE, flush the spool (bounded wait), close everything."""
        self._stack.close()

    def __enter__(self) -> TelemetryAgent:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _gpu(self) -> GpuSource | None:
        if self._gpu_choice != "config":
            return self._gpu_choice if not isinstance(self._gpu_choice, str) else None
        return None if self.config.gpu == "none" else detect_gpu_source(self.config.gpu)

    def _join(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.interval_s + 5.0)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            try:
                self.publish_telemetry()
            except Exception:
                _log.exception("telemetry sample failed")

    # --- messages ----------------------------------------------------------------------------------
    def sample(self) -> pb.Telemetry:
        """Build one Telemetry message from the pipelines, the system and the spool (not published)."""
        with self._lock:
            sources = dict(self._pipelines)
        msg = pb.Telemetry(interval_s=self.config.interval_s)
        for name, stats_fn in sorted(sources.items()):
            try:
                stats = stats_fn()
            except Exception:
                _log.warning("stats of pipeline %s failed", name, exc_info=True)
                continue
            p_msg = pipeline_message(name, stats)
            p_msg.regions.extend(self.analytics.regions(name))
            msg.pipelines.append(p_msg)
            if stats.model:
                with self._lock:
                    self._models[name] = stats.model
        if self._sampler is not None:
            msg.system.CopyFrom(self._sampler.sample())
        if self.spool is not None:
            s = self.spool.stats()
            msg.spool.pending = s.pending
            msg.spool.dropped = s.dropped_total
            msg.spool.bytes = s.bytes
        return msg

    def publish_telemetry(self) -> int:
        msg = self.sample()
        seq = self._publisher().publish("telemetry", msg, Priority.ROUTINE)
        with self._lock:
            self._latest = msg
        return seq

    def detections(self, pipeline: str, result: Result) -> int | None:
        """Offer one frame's detections; returns the sequence, or None when filtered or rate-limited."""
        ev = self.config.events
        if not ev.detections:
            return None
        dets = [d for d in result.detections if d.score >= ev.min_score and (ev.labels is None or d.label in ev.labels)]
        if not dets:
            return None
        if not self._bucket.take():
            with self._lock:
                self._suppressed += 1
            return None
        dets.sort(key=lambda d: d.score, reverse=True)
        with self._lock:
            suppressed, self._suppressed = self._suppressed, 0
        msg = pb.Event()
        d_msg = msg.detections
        d_msg.pipeline = pipeline
        d_msg.stream_id = result.stream_id
        d_msg.frame_sequence = result.sequence
        d_msg.captured_at.FromNanoseconds(int(result.timestamp * 1e9))
        d_msg.model_version = f"{result.model}:{result.model_version}"
        d_msg.suppressed = suppressed
        for d in dets[: ev.max_detections]:
            x1, y1, x2, y2 = d.box
            d_msg.detections.add(
                label=d.label,
                score=d.score,
                class_id=d.class_id,
                box=pb.Event.Box(x1=x1, y1=y1, x2=x2, y2=y2),
            )
        return self._publisher().publish("events", msg, Priority.BULK)

    def analytics_events(self, pipeline: str, result: Result) -> list[int]:
        """Offer one frame's analytics (its zone and line counts are kept for the periodic message; its
        zone, line and, if configured, track events are published within the stream's rate limit).
        Returns the sequences of the events published."""
        return [
            self._publisher().publish("events", m, Priority.ROUTINE) for m in self.analytics.events(pipeline, result)
        ]

    def on_result(self, pipeline: str, result: Result) -> None:
        """Everything the telemetry takes from one result: detection and analytics events, counts."""
        self.detections(pipeline, result)
        if result.regions or result.events or result.ended_tracks:
            self.analytics_events(pipeline, result)

    def swap(
        self,
        pipeline: str,
        phase: Any,
        from_version: str,
        to_version: str,
        *,
        reason: str = "",
        duration_s: float = 0.0,
        rollout_id: str = "",
    ) -> int:
        """A hot-swap step (started, succeeded, failed, rolled back); never rate-limited or dropped first."""
        msg = pb.Event(
            swap=pb.Event.Swap(
                pipeline=pipeline,
                phase=phase,
                from_version=from_version,
                to_version=to_version,
                reason=reason,
                duration_s=duration_s,
                rollout_id=rollout_id,
            )
        )
        if phase in (SwapPhase.PHASE_SUCCEEDED, SwapPhase.PHASE_ROLLED_BACK):
            with self._lock:
                self._models[pipeline] = to_version if phase == SwapPhase.PHASE_SUCCEEDED else from_version
        return self._publisher().publish("events", msg, Priority.CRITICAL)

    def engine_build(
        self, model_version: str, target: str, progress: float, *, done: bool = False, error: str = ""
    ) -> int:
        msg = pb.Event(
            engine_build=pb.Event.EngineBuild(
                model_version=model_version, target=target, progress=progress, done=done, error=error
            )
        )
        return self._publisher().publish("events", msg, Priority.CRITICAL)

    def error(self, component: str, message: str) -> int:
        msg = pb.Event(error=pb.Event.Error(component=component, message=message))
        return self._publisher().publish("events", msg, Priority.CRITICAL)

    # --- observation -------------------------------------------------------------------------------
    def _live_stats(self) -> dict[str, PipelineStats]:
        """Each pipeline's stats now (for the latency histograms at scrape time)."""
        with self._lock:
            sources = dict(self._pipelines)
        out: dict[str, PipelineStats] = {}
        for name, stats_fn in sources.items():
            try:
                out[name] = stats_fn()
            except Exception:
                _log.debug("stats of pipeline %s failed", name, exc_info=True)
        return out

    def _device_info(self) -> dict[str, str]:
        """``edgefleet_device_info``'s labels: who this is, and its SoC (Jetson label) and GPUs."""
        ident, latest = self.identity, self.latest()
        gpus = sorted({g.name for g in latest.system.gpus}) if latest is not None else []
        return {
            "device": ident.device_id,
            "fleet": ident.fleet,
            "agent_version": ident.agent_version,
            "soc": ident.labels.get("soc", ""),
            "gpu": ",".join(gpus),
        }

    def latest(self) -> pb.Telemetry | None:
        with self._lock:
            return self._latest

    @property
    def connected(self) -> bool:
        return self.publisher is not None and self.publisher.state is ConnectionState.CONNECTED

    def _publisher(self) -> MqttPublisher:
        if self.publisher is None:
            from ._errors import TelemetryError

            raise TelemetryError("telemetry is not started")
        return self.publisher

    def _publisher_figures(self) -> dict[str, float]:
        if self.publisher is None:
            return {}
        s = self.publisher.stats()
        return {
            "connected": float(s.state is ConnectionState.CONNECTED),
            "spool_pending": float(s.spool.pending),
            "spool_bytes": float(s.spool.bytes),
            "spool_dropped_total": float(s.spool.dropped_total),
            "sent_total": float(s.sent),
            "acked_total": float(s.acked),
            "rejected_total": float(s.rejected),
            "acknowledgements_total": float(s.watermarks),
            "unacknowledged": float(s.outstanding),
            "resends_total": float(s.resends),
            "suppressed_events": float(self._suppressed),
            "suppressed_analytics_events_total": float(self.analytics.suppressed_total),
        }
