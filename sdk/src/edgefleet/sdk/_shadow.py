"""Shadow mode: run a candidate model beside the serving one on a sample of live frames and measure how
far it agrees (``_shadow_kpis``), without its results ever reaching a sink.

Where it taps the pipeline: the batch thread offers every frame (:meth:`ShadowRun.offer`): a sampled one
is copied (a counted host-to-host copy) into a bounded queue of ``queue`` frames, the oldest dropped when
full; the result thread hands over the serving version's result for a sampled frame
(:meth:`ShadowRun.observe`, a dict lookup). One thread of its own (``edgefleet-shadow``, lowered CPU
priority where the OS allows) preprocesses, infers and decodes the candidate on one frame at a time and
compares the pair. What keeps the serving pipeline within budget:

* ``sample_rate``: the fraction of each stream's frames that is sampled (1/30: one frame a second of a
  30 fps camera);
* ``max_busy``: the share of wall time the shadow thread may spend working (a one-thread CPU session: its
  own CPU time, so a fraction of one core; otherwise the wall time of its frames); after a frame that took
  ``t`` it accepts no frame for ``t · (1/max_busy - 1)`` (frames offered then are ``skipped_budget``);
* the bounded queue: a shadow that falls behind drops frames (``dropped``), never the pipeline's.

Serving frames with no numpy image (frames in device memory) are not sampled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import ConfigError
from ._frames import Frame
from ._metrics import CopyCounter, LatencyWindow
from ._model import LoadedModel
from ._preprocess import make_preprocessor
from ._results import Classification, Detection, Result
from ._shadow_kpis import Agreement, AgreementCounter, output_labels
from ._validation import format_validation_error

__all__ = ["ShadowConfig", "ShadowGate", "ShadowRun", "model_labels", "one_thread", "shadow_config"]

_log = logging.getLogger(__name__)
_PENDING = 256  # sampled frames waiting for their other half, at most


class ShadowConfig(BaseModel):
    """How a candidate runs in shadow. Example: ``ShadowConfig(sample_rate=0.1, max_busy=0.25)``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    sample_rate: float = Field(0.1, gt=0.0, le=1.0, description="Fraction of each stream's frames run in shadow")
    max_busy: float = Field(0.5, gt=0.0, le=1.0, description="Share of wall time the shadow thread may work")
    queue: int = Field(2, ge=1, le=64, description="Sampled frames waiting for the shadow thread (oldest dropped)")
    iou: float = Field(0.5, gt=0.0, le=1.0, description="IoU for a candidate box to match a serving box")
    nice: int = Field(10, ge=0, le=19, description="CPU niceness added to the shadow thread (Linux)")


class ShadowGate(BaseModel):
    """A shadow phase before a hot swap's cut-over, and the agreement it must reach.

    ``min_f1``, ``max_class_mix_shift``, ``max_detection_rate_change``: None skips that check. The phase
    ends once ``min_frames`` frames were compared or after ``max_s`` seconds, whichever is first; fewer than
    ``min_frames`` compared by then refuses the candidate (an unjudged model does not serve).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    shadow: ShadowConfig = Field(default_factory=ShadowConfig)
    min_frames: int = Field(30, ge=1, description="Frames to compare before judging")
    max_s: float = Field(60.0, gt=0.0, description="Longest shadow phase, seconds")
    min_f1: float | None = Field(None, ge=0.0, le=1.0, description="Lowest F1 (detection) / top-1 agreement")
    max_class_mix_shift: float | None = Field(None, ge=0.0, le=1.0, description="Highest class mix shift")
    max_detection_rate_change: float | None = Field(None, ge=0.0, description="Highest |detection rate change|")
    phase: Literal["before", "after", "both"] = Field(
        "before",
        description="before: a shadow phase before the cut-over; after: the previous version kept in shadow "
        "during the health window (a canary), judged at its end, a miss rolls back; both",
    )

    def failures(self, a: Agreement) -> list[str]:
        """What the agreement fails, one line per KPI naming it, the value and the limit ([] passes)."""
        out: list[str] = []
        if a.frames < self.min_frames:
            out.append(f"shadow_frames {a.frames} < {self.min_frames} (too few frames compared in {self.max_s:g} s)")
        score, name = (a.top1_agreement, "shadow_top1_agreement") if a.top1_frames else (a.f1, "shadow_f1")
        if self.min_f1 is not None and score is not None and score < self.min_f1:
            out.append(f"{name} {score:.3f} < min_shadow_f1 {self.min_f1:g}")
        if self.max_class_mix_shift is not None and a.class_mix_shift > self.max_class_mix_shift:
            out.append(
                f"shadow_class_mix_shift {a.class_mix_shift:.3f} > max_class_mix_shift {self.max_class_mix_shift:g}"
            )
        limit = self.max_detection_rate_change
        if limit is not None and abs(a.detection_rate_change) > limit:
            out.append(f"shadow_detection_rate_change {a.detection_rate_change:+.3f} exceeds ±{limit:g}")
        return out


def shadow_config(value: ShadowConfig | Mapping[str, Any] | None) -> ShadowConfig:
    """``Pipeline.shadow``'s config argument validated (errors name the field)."""
    if value is None:
        return ShadowConfig()
    if isinstance(value, ShadowConfig):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"shadow config must be a ShadowConfig or a mapping, not {type(value).__name__}")
    try:
        return ShadowConfig.model_validate(dict(value))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "shadow")) from None


def one_thread(config: Any, device: str) -> bool:
    """True when a backend config runs inference on the calling thread only (ONNX Runtime, CPU, one
    intra-op thread): the shadow's busy budget can then count that thread's CPU time."""
    return (
        device == "cpu"
        and getattr(config, "type", "") == "onnxruntime"
        and getattr(config, "intra_op_threads", None) == 1
    )


def model_labels(model: LoadedModel) -> frozenset[str]:
    return output_labels(model.package.labels, model.package.manifest.decoder.params())


def _lower_priority(nice: int) -> None:
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    with contextlib.suppress(OSError, AttributeError):  # best effort: never a reason to fail
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)


class ShadowRun:
    """One candidate in shadow beside a running pipeline. Made by ``Pipeline.shadow`` or a swap's shadow
    phase; :meth:`agreement` reads the KPIs at any time, :meth:`stop` ends it."""

    def __init__(
        self,
        model: LoadedModel,
        serving_labels: frozenset[str],
        config: ShadowConfig,
        copies: CopyCounter,
        *,
        close_model: bool,
        inverse: bool = False,
        thread_time: bool = False,
        serving_ref: str | None = None,
    ) -> None:
        """``inverse``: ``model`` is the previous version kept in shadow after a cut-over (a canary): the
        KPIs still read as the new version (serving) against the previous one, as before the cut-over.
        ``thread_time``: the model runs entirely on the calling thread (a one-thread CPU session): the busy
        budget counts that thread's CPU time (waiting for a core on a loaded machine is not work); else the
        wall time of each frame. ``serving_ref``: pair only results of this serving version (a canary
        starts at the cut-over, when batches of the previous version are still on their way)."""
        if not isinstance(config, ShadowConfig):
            raise ConfigError(f"shadow config must be a ShadowConfig, not {type(config).__name__}")
        self.model, self.config, self.copies = model, config, copies
        self._close_model = close_model
        self._inverse = inverse
        self._thread_time = thread_time
        self._serving_ref = serving_ref
        self._counter = AgreementCounter(serving_labels, model_labels(model), config.iou)
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, int, np.ndarray]] = deque()
        self._pending: OrderedDict[tuple[str, int], list[Any]] = OrderedDict()  # key -> [serving, candidate]
        self._ready: deque[tuple[Result, tuple[Sequence[Detection], Sequence[Classification]]]] = deque()
        self._acc: dict[str, float] = {}
        self._free_at = 0.0
        self._busy = 0.0
        self._started = time.monotonic()
        self.latency = LatencyWindow(1024)
        self.sampled = self.dropped = self.skipped_budget = self.failed = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="edgefleet-shadow", daemon=True)

    @property
    def ref(self) -> str:
        return self.model.ref

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> ShadowRun:
        self._thread.start()
        return self

    # --- the pipeline's threads ----------------------------------------------------------------------
    def offer(self, frame: Frame) -> None:
        """Batch thread: sample this frame or not (cheap when not)."""
        acc = self._acc.get(frame.stream_id, 1.0) + self.config.sample_rate
        if acc < 1.0 + 1e-9:
            self._acc[frame.stream_id] = acc
            return
        self._acc[frame.stream_id] = acc - 1.0
        image = frame.image
        if not isinstance(image, np.ndarray) or self._stop.is_set():
            return
        if time.monotonic() < self._free_at:
            self.skipped_budget += 1
            return
        copy = image.copy()
        self.copies.add("host_to_host", image.nbytes)
        key = (frame.stream_id, frame.sequence)
        with self._cond:
            if len(self._queue) >= self.config.queue:
                old = self._queue.popleft()
                self._pending.pop((old[0], old[1]), None)
                self.dropped += 1
            self._queue.append((frame.stream_id, frame.sequence, copy))
            self._pending[key] = [None, None]
            while len(self._pending) > _PENDING:
                self._pending.popitem(last=False)
            self.sampled += 1
            self._cond.notify()

    def observe(self, results: Sequence[Result]) -> None:
        """Result thread: the serving version's results of a batch (only sampled frames are kept)."""
        if not self._pending:
            return
        with self._cond:
            for r in results:
                pair = self._pending.get((r.stream_id, r.sequence))
                if pair is None:
                    continue
                if self._serving_ref is not None and f"{r.model}:{r.model_version}" != self._serving_ref:
                    del self._pending[(r.stream_id, r.sequence)]  # another version served it: no pair
                    continue
                pair[0] = r
                if pair[1] is not None:
                    self._pair(r.stream_id, r.sequence)

    def _pair(self, stream_id: str, sequence: int) -> None:
        pair = self._pending.pop((stream_id, sequence))
        self._ready.append((pair[0], pair[1]))
        self._cond.notify()

    def _drain(self) -> None:
        """Count the completed pairs (holding the lock)."""
        while self._ready:
            serving, (dets, top) = self._ready.popleft()
            if self._inverse:
                self._counter.add(dets, serving.detections, top, serving.classifications)
            else:
                self._counter.add(serving.detections, dets, serving.classifications, top)

    # --- the shadow thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        _lower_priority(self.config.nice)
        buf = None
        try:
            while not self._stop.is_set():
                with self._cond:
                    while not self._queue and not self._ready and not self._stop.is_set():
                        self._cond.wait(0.1)
                    item = self._queue.popleft() if self._queue else None
                    self._drain()
                if item is None:
                    continue
                if buf is None:
                    buf = self._acquire()
                    if buf is None:
                        continue
                self._infer(item, buf)
        finally:
            if buf is not None:
                self.model.release_buffer(buf)

    def _acquire(self) -> Any:
        while not self._stop.is_set():
            buf = self.model.acquire_buffer(0.1)
            if buf is not None:
                return buf
        return None

    def _infer(self, item: tuple[str, int, np.ndarray], buf: Any) -> None:
        stream_id, sequence, image = item
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            pre = getattr(self, "_pre", None)
            if pre is None:  # a private preprocessor: a swap's batch thread takes the model's own at cut-over
                pre = self._pre = make_preprocessor(self.model.package.manifest.input, buf.device, self.copies)
            transform = pre(image, buf, 0)
            pre.finish(buf, 1)
            outputs = self.model.backend.infer(buf, 1)
            decoded = self.model.decoder.decode(outputs, [transform])[0]
        except Exception as exc:  # the candidate failing on live frames is a finding, not a crash
            self.failed += 1
            self.error = f"{type(exc).__name__}: {exc}"
            _log.warning("shadow %s failed on %s#%d: %s", self.ref, stream_id, sequence, self.error)
            with self._cond:
                self._pending.pop((stream_id, sequence), None)
            return
        took = time.perf_counter() - t0
        self.latency.add(took * 1000.0)
        busy = time.thread_time() - c0 if self._thread_time else took
        self._busy += busy
        self._free_at = time.monotonic() + busy * (1.0 / self.config.max_busy - 1.0)
        with self._cond:
            pair = self._pending.get((stream_id, sequence))
            if pair is None:
                return
            pair[1] = (decoded.detections, decoded.classifications)
            if pair[0] is not None:
                self._pair(stream_id, sequence)

    # --- reading and ending --------------------------------------------------------------------------
    def agreement(self) -> Agreement:
        """The KPIs over the frames compared so far (thread-safe snapshot)."""
        with self._cond:
            self._drain()
            p50, p95 = self.latency.percentiles((50.0, 95.0))
            elapsed = max(time.monotonic() - self._started, 1e-9)
            return self._counter.result(
                latency_p50_ms=p50,
                latency_p95_ms=p95,
                sampled=self.sampled,
                dropped=self.dropped,
                skipped_budget=self.skipped_budget,
                busy_ratio=self._busy / elapsed,
                extra={"failed": self.failed, "error": self.error},
            )

    def wait_frames(self, n: int, timeout_s: float, abort: threading.Event | None = None) -> Agreement:
        """Block until ``n`` frames were compared or ``timeout_s`` passed; the agreement then."""
        deadline = time.monotonic() + timeout_s
        while True:
            a = self.agreement()
            if a.frames >= n or time.monotonic() >= deadline or (abort is not None and abort.is_set()):
                return a
            time.sleep(0.05)

    def stop(self) -> Agreement:
        """End the shadow run (joins its thread; closes the candidate when this run loaded it)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(10.0)
        result = self.agreement()
        with self._cond:  # the pipeline's threads find nothing to hand over any more
            self._queue.clear()
            self._pending.clear()
        if self._close_model:
            self.model.close()
        return result
