"""Hot swap: replace the serving model of a running pipeline without dropping a frame.

1. load the new version beside the old one (in the caller's thread, off the frame path);
2. warm it up on a few real recent frames (sampled from the live streams only while a swap waits);
3. gate it: finite outputs of the declared shapes, the latency budget, the manifest's golden sample;
4. cut over at a batch boundary (each batch leases the serving model when it is formed, so a batch is
   processed by exactly one version, preprocessing included);
5. release the old version when its last in-flight batch returns — after the health window;
6. during the health window keep the previous version loaded: a failing batch (exception or non-finite
   output) rolls back at once and is re-run on the previous version, so every frame still gets exactly
   one result; a latency budget overrun at the end of the window rolls back too.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from pydantic import ValidationError

from ._backends import BackendConfig
from ._config import PipelineConfig
from ._errors import ConfigError, EdgefleetError, ModelPackageError
from ._metrics import CopyCounter, LatencyWindow
from ._model import LoadedModel, ModelSlot, load_model
from ._package import ModelPackage, load_package
from ._shadow import ShadowGate, ShadowRun, model_labels, one_thread
from ._signing import PublicKey
from ._sparse import all_finite
from ._validation import format_validation_error

__all__ = ["SwapEvent", "SwapHost", "SwapReport", "Swapper", "shadow_gate"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SwapEvent:
    """One step of a swap, for progress callbacks and telemetry."""

    stage: str  # verify | load | warmup | gate | shadow | cutover | health | rollback | done | failed
    message: str
    ref: str
    at: float = field(default_factory=time.time)


@dataclass
class SwapReport:
    """The outcome of :meth:`Pipeline.swap_model` or :meth:`Pipeline.rollback`.

    ``ok`` False means the new version was refused (or rolled back) and ``old_ref`` kept serving;
    ``stage`` says where it stopped and ``error`` why.
    """

    ok: bool
    old_ref: str
    new_ref: str
    stage: str
    error: str | None = None
    load_ms: float = 0.0
    warmup_ms: float = 0.0
    cutover_at: float | None = None
    warmup_frames: int = 0
    events: list[SwapEvent] = field(default_factory=list)
    #: the shadow phase's agreement KPIs (``Agreement.to_dict()``) when the swap had one
    shadow: dict[str, Any] | None = None


class _Health:
    """The health window of a freshly cut-over model."""

    def __init__(self, model: LoadedModel, previous: LoadedModel, window_s: float, budget_ms: float | None) -> None:
        self.model = model
        self.previous = previous
        self.deadline = time.monotonic() + window_s
        self.budget_ms = budget_ms
        self.latency = LatencyWindow(1024)
        self.failed: str | None = None
        self.canary: tuple[ShadowRun, ShadowGate] | None = None  # the previous version in shadow


class SwapHost(Protocol):
    """What a swap needs of the pipeline it swaps in: how its models are loaded, and where they serve."""

    @property
    def config(self) -> PipelineConfig: ...

    @property
    def backend_config(self) -> BackendConfig: ...

    @property
    def infer_workers(self) -> int: ...

    @property
    def slot(self) -> ModelSlot: ...

    @property
    def overrides(self) -> dict[str, float]: ...

    @property
    def copies(self) -> CopyCounter: ...


class Swapper:
    """Runs swaps and rollbacks for one pipeline; one at a time."""

    def __init__(self, pipeline: SwapHost) -> None:
        self.p = pipeline
        self._lock = threading.Lock()  # one swap/rollback at a time
        self._state = threading.Lock()  # guards _health and samples
        self._health: _Health | None = None
        self._want_samples = 0
        self._samples: list[np.ndarray] = []
        self._sampled = threading.Event()
        self._timer: threading.Timer | None = None
        self._rejected: list[LoadedModel] = []  # rolled back: in-flight batches bound to them are re-run
        self.shadow: ShadowRun | None = None  # a candidate in shadow (read by the batch and result threads)
        self.canary: dict[str, Any] | None = None  # the last canary shadow's agreement (Agreement.to_dict())
        self.history: list[SwapEvent] = []
        self.swaps = 0
        self.rollbacks = 0

    # --- called from the pipeline's threads ---------------------------------------------------------
    @property
    def sampling(self) -> bool:
        return self._want_samples > 0

    def offer_sample(self, image: np.ndarray) -> None:
        """Batch thread: keep a copy of a recent frame while a swap waits for warm-up frames."""
        with self._state:
            if self._want_samples <= 0 or not isinstance(image, np.ndarray):
                return
            self._samples.append(image.copy())
            self.p.copies.add("host_to_host", image.nbytes)
            self._want_samples -= 1
            if self._want_samples == 0:
                self._sampled.set()

    def watching(self, model: LoadedModel) -> bool:
        """True while ``model`` is inside its health window (its frames keep their pixels)."""
        h = self._health
        return h is not None and h.model is model and h.failed is None

    def rejected(self, model: LoadedModel) -> bool:
        """True for a version that was rolled back: batches still bound to it must be re-run."""
        return any(m is model for m in self._rejected)

    def holding_pixels(self) -> bool:
        return self._health is not None or self._want_samples > 0

    def check_batch(self, model: LoadedModel, outputs: dict[str, Any], infer_ms: float) -> str | None:
        """Infer thread, for a watched model: None if healthy, else the reason (and roll back)."""
        h = self._health
        if h is None or h.model is not model:
            return None
        for name, value in outputs.items():
            if not all_finite(value):
                return self.fail(model, f"output {name} is not finite (NaN/Inf)")
        h.latency.add(infer_ms)
        return None

    def fail(self, model: LoadedModel, reason: str) -> str:
        """A watched model misbehaved: roll back now (from any thread). Returns the reason."""
        h = self._health
        if h is None or h.model is not model:
            return reason
        with self._state:
            if h.failed is not None:
                return h.failed
            h.failed = reason
            self._rejected = [*self._rejected[-3:], model]
        self._stop_canary(h)
        self._emit(SwapEvent("rollback", f"health check failed: {reason}; back to {h.previous.ref}", model.ref))
        self.p.slot.swap(h.previous, close_old=True)
        self.rollbacks += 1
        with self._state:
            self._health = None
        self._cancel_timer()
        return reason

    # --- public operations (caller's thread) --------------------------------------------------------
    def _emit(
        self,
        event: SwapEvent,
        progress: Callable[[SwapEvent], None] | None = None,
        report: SwapReport | None = None,
    ) -> None:
        self.history.append(event)
        if report is not None:
            report.events.append(event)
        _log.info("swap %s: %s", event.stage, event.message)
        if progress is not None:
            try:
                progress(event)
            except Exception:
                _log.exception("swap progress callback failed")

    def _collect_samples(self, n: int, timeout: float) -> list[np.ndarray]:
        with self._state:
            self._samples = []
            self._sampled.clear()
            self._want_samples = n
        self._sampled.wait(timeout)
        with self._state:
            self._want_samples = 0
            samples, self._samples = self._samples, []
        return samples

    def swap_from(
        self,
        package: str | os.PathLike[str] | ModelPackage,
        *,
        health_window_s: float,
        latency_budget_ms: float | None,
        warmup_frames: int,
        sample_timeout_s: float,
        progress: Callable[[SwapEvent], None] | None,
        trusted_keys: Mapping[str, PublicKey] | None = None,
        require_signature: bool = False,
        shadow: ShadowGate | Mapping[str, Any] | None = None,
    ) -> SwapReport:
        """``Pipeline.swap_model``: check the arguments (misuse raises), load and verify a path (a package
        that does not verify is a refused report, stage ``verify``), then :meth:`swap`."""
        if not isinstance(package, (str, os.PathLike, ModelPackage)):
            raise TypeError(f"package must be a path or a ModelPackage, not {type(package).__name__}")
        for name, value, low in (
            ("health_window_s", health_window_s, 0.0),
            ("sample_timeout_s", sample_timeout_s, 0.0),
            ("latency_budget_ms", 1.0 if latency_budget_ms is None else latency_budget_ms, 0.0),
        ):  # checked before anything loads: a NaN window kept both versions loaded until close
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value < math.inf:
                raise ConfigError(f"{name} must be a finite number >= {low:g}, got {value!r}")
        if isinstance(warmup_frames, bool) or not isinstance(warmup_frames, int) or warmup_frames < 0:
            raise ConfigError(f"warmup_frames must be an integer >= 0, got {warmup_frames!r}")
        gate = shadow_gate(shadow)
        if trusted_keys is not None and not isinstance(trusted_keys, Mapping):
            raise TypeError(
                f"trusted_keys must be a mapping of key id to public key, not {type(trusted_keys).__name__}"
            )
        if not isinstance(package, ModelPackage):
            path = os.fspath(package)
            try:
                package = load_package(path, trusted_keys=trusted_keys, require_signature=require_signature)
            except (ModelPackageError, OSError) as exc:  # OSError: unreadable (permissions, I/O error)
                with self._lock:
                    old = self.p.slot.current.ref
                    report = SwapReport(ok=False, old_ref=old, new_ref=path, stage="verify")
                    return self._refuse(report, "verify", str(exc), progress)
        return self.swap(
            package,
            health_window_s=health_window_s,
            latency_budget_ms=latency_budget_ms,
            warmup_frames=warmup_frames,
            sample_timeout_s=sample_timeout_s,
            progress=progress,
            shadow=gate,
        )

    def swap(
        self,
        package: ModelPackage,
        *,
        health_window_s: float,
        latency_budget_ms: float | None,
        warmup_frames: int,
        sample_timeout_s: float,
        progress: Callable[[SwapEvent], None] | None,
        shadow: ShadowGate | None = None,
    ) -> SwapReport:
        with self._lock:
            self._finish_health()  # a new swap ends the previous health window
            slot = self.p.slot
            old = slot.current
            report = SwapReport(ok=False, old_ref=old.ref, new_ref=package.ref, stage="load")
            t0 = time.perf_counter()
            self._emit(SwapEvent("load", f"loading {package.ref} beside {old.ref}", package.ref), progress, report)
            try:
                new = load_model(
                    package,
                    self.p.backend_config,
                    device=self.p.config.device,
                    max_batch=self.p.config.max_batch,
                    overrides=self.p.overrides,
                    warmup=False,
                    copies=self.p.copies,
                    workers=self.p.infer_workers,
                    gpu_filters=not self.p.config.keep_raw,
                )
            except EdgefleetError as exc:
                return self._refuse(report, "load", str(exc), progress)
            except Exception as exc:  # a runtime error the backend did not translate: still a refusal
                return self._refuse(report, "load", f"{type(exc).__name__}: {exc}", progress)
            report.load_ms = (time.perf_counter() - t0) * 1000.0
            try:
                ok = self._warm_and_gate(new, report, latency_budget_ms, warmup_frames, sample_timeout_s, progress)
                if ok and shadow is not None and shadow.phase in ("before", "both"):
                    ok = self._shadow_phase(new, shadow, report, progress)
            except BaseException:
                new.close()
                raise
            if not ok:
                new.close()
                return report
            report.stage = "cutover"
            with self._state:
                self._health = _Health(new, old, health_window_s, latency_budget_ms) if health_window_s > 0 else None
            slot.swap(new, close_old=health_window_s <= 0)
            report.cutover_at = time.time()
            self.swaps += 1
            self._emit(SwapEvent("cutover", f"{new.ref} serving from the next batch", new.ref), progress, report)
            if shadow is not None and shadow.phase in ("after", "both") and self._health is not None:
                self._start_canary(self._health, shadow, progress, report)
            if health_window_s > 0:
                self._timer = threading.Timer(health_window_s, self._end_window, args=(new,))
                self._timer.daemon = True
                self._timer.start()
            report.ok = True
            report.stage = "health" if health_window_s > 0 else "done"
            return report

    def _warm_and_gate(
        self,
        new: LoadedModel,
        report: SwapReport,
        budget_ms: float | None,
        n_frames: int,
        sample_timeout_s: float,
        progress: Callable[[SwapEvent], None] | None,
    ) -> bool:
        report.stage = "warmup"
        samples = self._collect_samples(n_frames, sample_timeout_s) if n_frames > 0 else []
        if not samples:
            spec = new.package.manifest.input
            samples = [np.full((spec.height, spec.width, 3), 114, np.uint8)]
            note = "no live frames arrived; warmed up on a grey frame"
        else:
            note = f"warming up on {len(samples)} recent frames"
        report.warmup_frames = len(samples)
        self._emit(SwapEvent("warmup", note, new.ref), progress, report)
        buf = new.acquire_buffer(5.0)
        if buf is None:
            return self._refuse(report, "warmup", "no input buffer", progress).ok
        try:
            n = min(len(samples), buf.capacity)
            times = []
            outputs: dict[str, Any] = {}
            for first in (True, False):  # the first run pays for lazy initialisation, the second is timed
                for i in range(n):
                    new.preprocess(samples[i], buf, i)
                new.preprocess.finish(buf, n)
                t = time.perf_counter()
                if first:  # every execution context the workers will use (GPU lanes) initialises here
                    new.backend.warmup(buf, n, iterations=1)
                else:
                    outputs = new.backend.infer(buf, n)
                times.append((time.perf_counter() - t) * 1000.0)
            report.warmup_ms = min(times[1:] or times)
            report.stage = "gate"
            reason = self._gate(new, outputs, n, report.warmup_ms, budget_ms, buf)
        except EdgefleetError as exc:
            reason = f"warm-up failed: {exc}"
        except Exception as exc:  # a model that crashes its decoder or backend during warm-up
            reason = f"warm-up failed: {type(exc).__name__}: {exc}"
        finally:
            new.release_buffer(buf)
        if reason is not None:
            return self._refuse(report, report.stage, reason, progress).ok
        self._emit(SwapEvent("gate", f"passed (warm-up {report.warmup_ms:.1f} ms)", new.ref), progress, report)
        return True

    def _shadow_phase(
        self, new: LoadedModel, gate: ShadowGate, report: SwapReport, progress: Callable[[SwapEvent], None] | None
    ) -> bool:
        """Run ``new`` in shadow beside the serving version until ``gate.min_frames`` frames were compared
        (or ``gate.max_s``), then judge the agreement; False: refused (stage ``shadow``)."""
        report.stage = "shadow"
        if self.shadow is not None and self.shadow.running:
            return self._refuse(report, "shadow", f"{self.shadow.ref} is in shadow already", progress).ok
        cfg = gate.shadow
        note = (
            f"in shadow on {cfg.sample_rate:.3g} of frames until {gate.min_frames} compared (at most {gate.max_s:g} s)"
        )
        self._emit(SwapEvent("shadow", note, new.ref), progress, report)
        run = ShadowRun(
            new,
            model_labels(self.p.slot.current),
            cfg,
            self.p.copies,
            close_model=False,
            thread_time=one_thread(self.p.backend_config, self.p.config.device),
            serving_ref=self.p.slot.current.ref,
        ).start()
        self.shadow = run
        try:
            run.wait_frames(gate.min_frames, gate.max_s)
        finally:
            self.shadow = None
            agreement = run.stop()
        report.shadow = agreement.to_dict()
        failures = gate.failures(agreement)
        if run.failed:
            failures.append(f"shadow inference failed on {run.failed} frame(s): {run.error}")
        if failures:
            return self._refuse(report, "shadow", "shadow gate: " + "; ".join(failures), progress).ok
        a = agreement
        summary = (
            f"passed: f1 {a.f1:.3f}, class mix shift {a.class_mix_shift:.3f}, detection rate change "
            f"{a.detection_rate_change:+.3f} over {a.frames} frames (shared labels: {len(a.shared_labels)})"
        )
        self._emit(SwapEvent("shadow", summary, new.ref), progress, report)
        return True

    def _gate(
        self,
        new: LoadedModel,
        outputs: dict[str, Any],
        n: int,
        warm_ms: float,
        budget_ms: float | None,
        buf: Any,
    ) -> str | None:
        manifest = new.package.manifest
        for spec in manifest.outputs:
            arr = outputs.get(spec.name)
            if arr is None:
                return f"output {spec.name} missing"
            shape = np.shape(arr)  # the sparse forms carry their logical shape: no dense copy
            if shape[0] != n or any(d not in (-1, r) for d, r in zip(spec.shape[1:], shape[1:], strict=False)):
                return f"output {spec.name} has shape {list(shape)}, the manifest says {list(spec.shape)}"
            if not all_finite(arr):
                return f"output {spec.name} is not finite (NaN/Inf) on real frames"
        new.decoder.decode(outputs, [new.preprocess.transform_for(64, 64)] * n)  # the decoder must accept them
        if budget_ms is not None and warm_ms > budget_ms:
            return f"latency {warm_ms:.1f} ms per batch exceeds the budget of {budget_ms:.1f} ms"
        golden = manifest.golden
        if golden is not None and isinstance(buf.array, np.ndarray):
            inputs = np.load(new.package.path_of(golden.inputs))
            expected = np.load(new.package.path_of(golden.outputs))
            x = inputs[manifest.input.name]
            rows = min(x.shape[0], buf.capacity)
            buf.array[:rows] = x[:rows]
            got = new.backend.infer(buf, rows)
            for name in expected.files:
                if not np.allclose(got[name], expected[name][:rows], atol=golden.atol, rtol=golden.rtol):
                    return f"golden sample: output {name} differs beyond atol={golden.atol} rtol={golden.rtol}"
        return None

    def _refuse(
        self, report: SwapReport, stage: str, reason: str, progress: Callable[[SwapEvent], None] | None
    ) -> SwapReport:
        report.ok, report.stage, report.error = False, stage, reason
        self._emit(
            SwapEvent(
                "failed",
                f"{report.new_ref} refused at {stage}: {reason}; {report.old_ref} keeps serving",
                report.new_ref,
            ),
            progress,
            report,
        )
        return report

    def _start_canary(
        self, h: _Health, gate: ShadowGate, progress: Callable[[SwapEvent], None] | None, report: SwapReport
    ) -> None:
        run = ShadowRun(
            h.previous,
            model_labels(h.model),
            gate.shadow,
            self.p.copies,
            close_model=False,
            inverse=True,
            thread_time=one_thread(self.p.backend_config, self.p.config.device),
            serving_ref=h.model.ref,
        )
        h.canary = (run, gate)
        self.shadow = run.start()
        note = f"{h.previous.ref} kept in shadow for the health window (canary)"
        self._emit(SwapEvent("health", note, h.model.ref), progress, report)

    def _stop_canary(self, h: _Health) -> Any:
        """End a health window's canary shadow (before its model is retired or serves again)."""
        if h.canary is None:
            return None
        run, h.canary = h.canary[0], None
        if self.shadow is run:
            self.shadow = None
        return run.stop()

    def _end_window(self, model: LoadedModel) -> None:
        h = self._health
        if h is None or h.model is not model:
            return
        gate = h.canary[1] if h.canary is not None else None
        agreement = self._stop_canary(h)
        if gate is not None and agreement is not None:
            self.canary = agreement.to_dict()
            misses = [f for f in gate.failures(agreement) if not f.startswith("shadow_frames")]  # few: no opinion
            if misses and agreement.frames > 0:
                self.fail(model, f"canary shadow against {h.previous.ref}: " + "; ".join(misses))
                return
            self._emit(
                SwapEvent(
                    "health", f"canary shadow passed: f1 {agreement.f1:.3f} over {agreement.frames} frames", model.ref
                )
            )
        p95 = h.latency.percentiles((95.0,))[0]
        if h.budget_ms is not None and h.latency.count >= 5 and p95 > h.budget_ms:
            self.fail(model, f"p95 inference latency {p95:.1f} ms over the budget of {h.budget_ms:.1f} ms")
            return
        self._finish_health()

    def _finish_health(self) -> None:
        """The health window passed (or a new swap starts): release the previous version."""
        self._cancel_timer()
        with self._state:
            h, self._health = self._health, None
        if h is not None:
            self._stop_canary(h)
        if h is not None and h.failed is None:
            self.p.slot.retire(h.previous)
            self._emit(SwapEvent("done", f"{h.model.ref} healthy; released {h.previous.ref}", h.model.ref))

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
        self._timer = None

    def rollback(self, reason: str) -> SwapReport:
        with self._lock:
            h = self._health
            current = self.p.slot.current
            if h is None:
                return SwapReport(
                    ok=False,
                    old_ref=current.ref,
                    new_ref=current.ref,
                    stage="rollback",
                    error="no previous version is kept (the health window has passed)",
                )
            self.fail(h.model, reason)
            return SwapReport(
                ok=True, old_ref=h.model.ref, new_ref=h.previous.ref, stage="rollback", cutover_at=time.time()
            )

    def close(self) -> None:
        run, self.shadow = self.shadow, None
        if run is not None:
            run.stop()
        self._cancel_timer()
        with self._state:
            h, self._health = self._health, None
        if h is not None:
            self.p.slot.retire(h.previous)


def shadow_gate(value: ShadowGate | Mapping[str, Any] | None) -> ShadowGate | None:
    """A swap's ``shadow`` argument as a :class:`ShadowGate` (a mapping is validated; errors name the field)."""
    if value is None or isinstance(value, ShadowGate):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"shadow must be a ShadowGate or a mapping, not {type(value).__name__}")
    try:
        return ShadowGate.model_validate(dict(value))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "shadow")) from None
