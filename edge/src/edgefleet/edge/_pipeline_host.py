"""One running SDK pipeline as the agent sees it: start it on a package, report its health, hot-swap a
new version into it (``Pipeline.swap_model``), roll it back, and restart it when it fails (a sink's disk
filled, a file source went bad): with backoff, 1 s doubling to 60 s, back to 1 s after a minute of
running. Blocking calls: run them off the event loop."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from edgefleet.sdk import EdgefleetError, ModelPackage, Pipeline, PipelineConfig, PipelineStats, Result
from edgefleet.sdk.kit import plan_live_change, redact

from ._camera_status import camera_statuses

__all__ = ["PipelineHost", "SwapOutcome", "shadow_metrics"]

_log = logging.getLogger(__name__)


class SwapOutcome:
    def __init__(self, ok: bool, stage: str, error: str | None, metrics: dict[str, float]) -> None:
        self.ok = ok
        self.stage = stage
        self.error = error
        self.metrics = metrics


class PipelineHost:
    def __init__(
        self,
        name: str,
        config: PipelineConfig,
        on_result: Callable[[Result], None] | None = None,
        services: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self._on_result = on_result
        self.services = dict(services or {})  # offered to the pipeline's sinks (the agent's telemetry)
        self.pipeline: Pipeline | None = None
        self.package: ModelPackage | None = None
        self.previous: ModelPackage | None = None
        self.error: str | None = None
        self._lock = threading.Lock()
        self._last: tuple[float, int] | None = None
        self._last_telemetry: tuple[float, int] | None = None
        self.restarts = 0  # times the watchdog restarted a failed pipeline
        self._closing = threading.Event()
        self._watchdog: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self, package: ModelPackage) -> None:
        config = self.config.model_copy(update={"model": package.root})
        pipeline = Pipeline.from_config(
            config,
            on_result=self._result,  # never None: the pipeline would queue every result for an iterator
            name=self.name,
            services=self.services,
        )
        pipeline.start()
        self.pipeline, self.package = pipeline, package
        _log.info("pipeline %s serving %s", self.name, package.ref)
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name=f"edgefleet-watch-{self.name}", daemon=True)
            self._watchdog.start()

    def reconfigure(self, config: PipelineConfig, package: ModelPackage | None = None) -> list[str]:
        """Make the pipeline run ``config`` (a pipeline spec's): live changes when only sources, sinks and
        analytics differ (the other streams keep flowing), else a restart of this pipeline alone, on
        ``package`` when the spec names another model. A live change that fails part way restarts the
        pipeline on the config it ran before, then raises: the host never runs a config it cannot name."""
        with self._lock:
            old, p = self.config, self.pipeline
            if p is None or self.package is None:
                self.config = config
                return ["(not running)"]
            target = package or self.package
            plan = plan_live_change(
                old.model_copy(update={"model": target.root}), config.model_copy(update={"model": target.root})
            )
            if package is not None and package.ref != self.package.ref:
                plan.restart.append(f"model {self.package.ref} -> {package.ref}")
            if plan.empty:
                self.config = config
                return []
            if plan.restart:
                p.close()
                self.config = config
                self.start(target)
                return [f"restarted ({', '.join(plan.restart)})"]
            try:
                done = p.reconfigure(config.model_copy(update={"model": target.root}))
            except EdgefleetError:
                _log.error("pipeline %s: live change failed; restarting it on its previous config", self.name)
                p.close()
                self.config = old
                self.start(target)
                raise
            self.config = config
            return done

    def close(self) -> None:
        self._closing.set()
        if self._watchdog is not None:
            self._watchdog.join(10.0)
        if self.pipeline is not None:
            self.pipeline.close()

    def _watch(self, period_s: float = 0.5, max_delay_s: float = 60.0, stable_s: float = 60.0) -> None:
        """Restart the pipeline when it fails, on the version it served; a restart that fails is retried."""
        delay, since = 1.0, time.monotonic()
        while not self._closing.wait(period_s):
            self.follow_rollback()
            p = self.pipeline
            if p is None or p.error is None:
                if time.monotonic() - since > stable_s:
                    delay = 1.0
                continue
            _log.error(
                "pipeline %s failed: %s; restarting it on %s in %.0f s",
                self.name, redact(str(p.error)) or type(p.error).__name__, self.ref, delay,
            )  # fmt: skip
            if self._closing.wait(delay):
                return
            self.follow_rollback()
            with self._lock:  # not during a swap
                if self._closing.is_set() or self.pipeline is not p or self.package is None:
                    continue
                try:
                    p.close()
                except Exception:  # a failed pipeline's close must not stop the watchdog
                    _log.warning("pipeline %s: closing the failed pipeline", self.name, exc_info=True)
                try:
                    self.start(self.package)
                    self.restarts += 1
                    since = time.monotonic()
                except EdgefleetError as exc:
                    _log.error("pipeline %s: restart failed: %s", self.name, redact(str(exc)))
            delay = min(delay * 2.0, max_delay_s)

    def follow_rollback(self) -> bool:
        """After the SDK rolled a new version back in its health window (a failing batch), point the host
        at the package that serves again, so a restart starts on it and not on the rejected one. Skipped
        while a swap holds the lock (it sets both references itself). True when it changed them."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            p, pkg, prev = self.pipeline, self.package, self.previous
            if p is None or pkg is None or prev is None:
                return False
            try:
                serving = p.model.ref
            except EdgefleetError:
                return False
            if serving == pkg.ref or serving != prev.ref:
                return False
            _log.warning("pipeline %s: %s was rolled back in its health window; %s serves", self.name, pkg.ref, serving)
            self.package, self.previous = prev, None
            return True
        finally:
            self._lock.release()

    def _result(self, result: Result) -> None:
        """Called on the pipeline's thread for every result: hand it on, never let a listener break it."""
        if self._on_result is not None:
            try:
                self._on_result(result)
            except Exception:
                _log.warning("pipeline %s: result listener failed", self.name, exc_info=True)

    def telemetry_stats(self) -> PipelineStats:
        """``Pipeline.stats()`` of whichever pipeline serves now, with ``fps`` over the interval since the
        previous call (the SDK's figure averages since start, too slow to show a swap's effect)."""
        p = self.pipeline
        if p is None:
            raise EdgefleetError(f"pipeline {self.name} is not running")
        stats = p.stats()
        now = time.monotonic()
        last, self._last_telemetry = self._last_telemetry, (now, stats.results)
        if last is not None and now > last[0] and stats.results >= last[1]:
            stats = dataclasses.replace(stats, fps=(stats.results - last[1]) / (now - last[0]))
        return stats

    @property
    def ref(self) -> str:
        p = self.pipeline
        if p is not None:
            try:
                return p.model.ref
            except EdgefleetError:
                pass
        return self.package.ref if self.package else ""

    @property
    def model_name(self) -> str:
        return self.ref.split(":")[0]

    # --- health ------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """PipelineStatus as a dict: state, serving ref, fps over the last interval, latency, drops."""
        self.follow_rollback()
        p = self.pipeline
        if p is None:
            return {
                "name": self.name,
                "model_ref": self.ref,
                "state": "stopped",
                "health": {"healthy": False, "detail": self.error or "not started"},
            }
        stats = p.stats()
        now = time.monotonic()
        fps = stats.fps
        if self._last is not None and now > self._last[0]:
            fps = (stats.results - self._last[1]) / (now - self._last[0])
        self._last = (now, stats.results)
        failed = p.error is not None
        streams = list(stats.streams.values())
        health = {
            "fps": fps,
            "latency_p50_ms": max((s.latency_p50_ms for s in streams), default=0.0),
            "latency_p95_ms": max((s.latency_p95_ms for s in streams), default=0.0),
            "frames_in": stats.frames_in,
            "results": stats.results,
            "dropped": stats.dropped,
            "errors": 1 if failed else 0,
            "healthy": not failed,
            "detail": str(p.error) if failed else "",
        }
        return {
            "name": self.name,
            "model_ref": self.ref,
            "state": "failed" if failed else "running",
            "health": health,
            "previous_ref": self.previous.ref if self.previous else "",
            "quality": [q.to_dict() for q in stats.quality.values()],  # serving version and its baseline
            "cameras": camera_statuses(streams),
        }

    # --- swaps -------------------------------------------------------------------------------------
    def swap(
        self,
        package: ModelPackage,
        health_window_s: float,
        progress: Callable[[str, str], None],
        shadow: Mapping[str, Any] | None = None,
    ) -> SwapOutcome:
        """Hot-swap ``package`` in; a refusal leaves the old version serving. ``shadow``: a shadow phase
        before the cut-over (``ShadowGate`` fields); its KPIs come back in the outcome's metrics."""
        with self._lock:
            p = self.pipeline
            if p is None:
                return SwapOutcome(False, "load", f"pipeline {self.name} is not running", {})
            old = self.package
            swap = getattr(p, "swap_model", None)
            if swap is None:
                return self._restart_swap(package, progress)

            def on_event(ev: Any) -> None:
                progress(str(getattr(ev, "stage", "")), str(getattr(ev, "message", "")))

            kw: dict[str, Any] = {"shadow": dict(shadow)} if shadow else {}
            report = swap(package, health_window_s=health_window_s, progress=on_event, **kw)
            metrics = {"load_ms": float(report.load_ms), "warmup_ms": float(report.warmup_ms)}
            metrics |= shadow_metrics(getattr(report, "shadow", None))
            if not report.ok:
                return SwapOutcome(False, report.stage, report.error or "refused", metrics)
            self.previous, self.package = old, package
            return SwapOutcome(True, report.stage, None, metrics)

    def _restart_swap(self, package: ModelPackage, progress: Callable[[str, str], None]) -> SwapOutcome:
        """For an SDK without hot swap: start a pipeline on the new version, then stop the old one."""
        progress("load", f"starting a pipeline on {package.ref} (no hot swap in this SDK)")
        old_pipeline, old = self.pipeline, self.package
        t0 = time.perf_counter()
        try:
            self.start(package)
        except EdgefleetError as exc:
            self.pipeline, self.package = old_pipeline, old
            return SwapOutcome(False, "load", str(exc), {})
        if old_pipeline is not None:
            old_pipeline.close()
        self.previous = old
        progress("cutover", f"{package.ref} serving (pipeline restarted)")
        return SwapOutcome(True, "cutover", None, {"load_ms": (time.perf_counter() - t0) * 1000.0})

    def rollback_to(self, package: ModelPackage, progress: Callable[[str, str], None]) -> SwapOutcome:
        """Serve ``package`` again: the instant rollback when it is the previous version still kept warm,
        otherwise a swap without health window."""
        if self.ref == package.ref:
            return SwapOutcome(True, "done", None, {})
        p = self.pipeline
        rollback = getattr(p, "rollback", None)
        if rollback is not None and self.previous is not None and self.previous.ref == package.ref:
            with self._lock:
                report = rollback("rollback requested by the controller")
            if report.ok and self.ref == package.ref:
                self.previous, self.package = self.package, package
                return SwapOutcome(True, "rollback", None, {})
        return self.swap(package, 0.0, progress)


def shadow_metrics(agreement: Mapping[str, Any] | None) -> dict[str, float]:
    """A swap report's shadow KPIs (``Agreement.to_dict()``) as flat ``shadow_*`` numbers."""
    if not agreement:
        return {}
    return {
        f"shadow_{k}": float(v) for k, v in agreement.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
