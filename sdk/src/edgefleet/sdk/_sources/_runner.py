"""One thread per source: open, decode into pool slots, pace, reconnect live streams, queue frames."""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections.abc import Callable

import numpy as np

from .._errors import SourceError
from .._frames import Allocator, Frame, FramePool, FrameQueue, FrameSlot, host_allocator
from .._health import CameraState, HealthReason, reason_of
from .._log_context import bind
from .._metrics import CopyCounter, StreamMetrics
from .._redact import redact, redact_uri
from ._base import Source, SourceDisconnected, SourceUnavailable

__all__ = ["Backoff", "SourceRunner"]

_log = logging.getLogger(__name__)


class Backoff:
    """Exponential backoff with jitter: delay n is uniform in [d/2, d], d = min(cap, base * 2**n)."""

    def __init__(self, base: float = 0.5, cap: float = 10.0, rng: random.Random | None = None) -> None:
        self.base, self.cap = base, cap
        self._n = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        d = min(self.cap, self.base * (2**self._n))
        self._n = min(self._n + 1, 30)
        return self._rng.uniform(d / 2, d)

    def reset(self) -> None:
        self._n = 0


class SourceRunner:
    """Reads one source on its own thread into a fixed frame pool and a bounded frame queue.

    Finite sources (files, image folders) block when the queue is full and never drop. Live sources never
    wait: under pressure the oldest queued frame is dropped and counted, and a broken stream is reopened
    with jittered backoff while the rest of the pipeline keeps running.
    """

    def __init__(
        self,
        source: Source,
        queue: FrameQueue,
        metrics: StreamMetrics,
        copies: CopyCounter,
        stop: threading.Event,
        on_error: Callable[[BaseException], None],
        *,
        pool_size: int,
        allocator: Allocator = host_allocator,
        backoff: Backoff | None = None,
        max_frames: int | None = None,
        first_sequence: int = 0,
        pipeline: str = "",
    ) -> None:
        self.source = source
        self.pipeline = pipeline  # the pipeline's name, on this thread's log lines
        self.queue = queue
        self.metrics = metrics
        self.copies = copies
        self.stop = stop
        self.on_error = on_error
        self.pool_size = pool_size
        self.allocator = allocator
        self.backoff = backoff or Backoff()
        self.max_frames = max_frames
        self.pool: FramePool | None = None
        self.pool_allocations = 0
        self._slot_refs: list[weakref.ref[FrameSlot]] = []  # every pool's slots, weakly
        #: set when the read loop is over (before the source closes): every frame it read is queued
        self.reading_done = threading.Event()
        self.display_uri = redact_uri(source.spec.uri)
        self._thread = threading.Thread(target=self._run, name=f"source-{source.stream_id}", daemon=True)
        self._seq = 0
        self._local_drops = 0
        self.first_sequence = first_sequence  # a replaced camera's stream goes on from the old one's sequence

    @property
    def next_sequence(self) -> int:
        """The sequence number the next frame read will carry."""
        return self.first_sequence + self._seq

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    # --- opening -----------------------------------------------------------------------------------
    def _open(self, *, reopening: bool = False) -> bool:
        """Open the source; live sources retry until ``stop``. Returns False when stopped first.

        At the first open only :class:`SourceUnavailable` is retried (a malformed URI fails at once);
        when reopening a live stream that worked before, every SourceError is (a USB camera unplugged
        and plugged back loses its device node for a while)."""
        retry: type[SourceError] = SourceError if reopening else SourceUnavailable
        logged: str | None = None  # a failure said once at WARNING; the same again is only DEBUG
        started = time.monotonic()
        while not self.stop.is_set():
            try:
                self.source.open()
            except retry as exc:
                if not self.source.live:
                    raise
                error = redact(str(exc))
                self.metrics.set_error(error)
                self.metrics.health.set(CameraState.RECONNECTING, reason_of(exc) or HealthReason.UNREACHABLE)
                delay = self.backoff.next_delay()
                level = logging.DEBUG if error == logged else logging.WARNING
                _log.log(level, "%s: %s; retrying in %.1fs", self.source.stream_id, error, delay)
                logged = error
                self.stop.wait(delay)
                continue
            if logged is not None and not reopening:
                _log.info("%s: opened after %.1fs", self.source.stream_id, time.monotonic() - started)
            self.metrics.connected = True
            self.backoff.reset()
            shape = self.source.frame_shape()
            if shape is not None:
                self._ensure_pool((shape[0], shape[1], 3))
            return True
        return False

    def _ensure_pool(self, shape: tuple[int, int, int]) -> FramePool:
        if self.pool is None or self.pool.shape != shape:
            if self.pool is not None:
                _log.info(
                    "%s: frame size changed to %sx%s; new frame pool",
                    self.source.stream_id,
                    shape[1],
                    shape[0],
                )
            self.pool = FramePool(shape, self.pool_size, self.source.frame_allocator(self.allocator))
            self.pool_allocations += 1
            self._slot_refs = [r for r in self._slot_refs if r() is not None] + self.pool.slot_refs()
        return self.pool

    @property
    def leases(self) -> int:
        """Slots leased now: its pool's, or once the pool is let go of (removed, closed), the slots that
        are still alive and leased (a frame never released)."""
        pool = self.pool
        if pool is not None:
            return pool.leases
        return sum(1 for r in self._slot_refs if (slot := r()) is not None and slot.leased)

    def slots_alive(self) -> int:
        """Slots of this runner's pools still alive: its pool's while it reads, then those that frames
        in flight (or anything keeping a frame) still hold."""
        return sum(1 for r in self._slot_refs if r() is not None)

    # --- the loop ----------------------------------------------------------------------------------
    def _run(self) -> None:
        bind(pipeline=self.pipeline, stream=self.source.stream_id)
        try:
            if not self._open():
                return
            self._loop()
        except BaseException as exc:  # surfaced to the pipeline, which stops and re-raises
            self.metrics.health.set(CameraState.FAILED, reason_of(exc) or _failure_reason(exc))
            self.metrics.failed = True
            self.metrics.set_error(redact(str(exc)) or type(exc).__name__)
            self.on_error(exc)
        finally:
            self.reading_done.set()  # (before a slow source's close: its removal need not wait for that)
            try:
                self.source.close()
            finally:
                self.metrics.connected = False
                self.metrics.finished = True
                health = self.metrics.health
                # stopped before any frame: a stop does not make a dead camera healthy, it keeps its state
                if health.state is not CameraState.FAILED and not (self.stop.is_set() and health.first_frame is None):
                    health.set(CameraState.ENDED, None if self.stop.is_set() else _end_reason(self))
                self.queue.finish()

    def _count_drop(self) -> None:
        self._local_drops += 1
        self.metrics.dropped = self.queue.dropped + self._local_drops

    def _acquire_slot(self) -> tuple[FrameSlot | None, bool]:
        """A free slot (None when the pool is not sized yet or, live, exhausted). Second: stopped."""
        pool = self.pool
        if pool is None:
            return None, False
        if self.source.live:
            slot = pool.try_acquire()
            if slot is None and self.queue.drop_oldest():
                slot = pool.try_acquire()
            return slot, False
        while not self.stop.is_set():
            slot = pool.acquire(0.1)
            if slot is not None:
                return slot, False
        return None, True

    def _loop(self) -> None:
        spec = self.source.spec
        fps = self.source.nominal_fps() if spec.realtime else None
        t0 = time.monotonic()
        scratch: np.ndarray | None = None
        while not self.stop.is_set():
            if self.max_frames is not None and self._seq >= self.max_frames:
                return
            if fps:
                delay = t0 + self._seq / fps - time.monotonic()
                if delay > 0 and self.stop.wait(delay):
                    return
            slot, stopped = self._acquire_slot()
            if stopped:
                return
            target: np.ndarray | None = slot.array if slot is not None else None
            if target is None and self.pool is not None:
                # a live source with every slot in flight: keep draining the camera, drop this frame
                if scratch is None or scratch.shape != self.pool.shape:
                    scratch = np.empty(self.pool.shape, np.uint8)
                target = scratch
            copies_before = self.source.copies
            try:
                image = self.source.read(target)
            except SourceDisconnected as exc:
                if slot is not None:
                    slot.release()
                if not self._reconnect(str(exc), exc.reason):
                    return
                t0 = time.monotonic() - (self._seq / fps if fps else 0.0)
                continue
            except BaseException:
                if slot is not None:
                    slot.release()
                raise
            if image is None:
                self.metrics.skipped = self.source.skipped
                if slot is not None:
                    slot.release()
                return
            if self.metrics.last_error is not None:  # frames flow again: healthy (recent_error keeps it)
                self.metrics.clear_error()
            captured, timestamp = time.monotonic(), time.time()
            if self.metrics.tracking:
                self.metrics.health.frame(captured)
            for _ in range(self.source.copies - copies_before):
                self.copies.add(self.source.copy_kind, image.nbytes)
                self.metrics.copies += 1
            self.metrics.skipped = self.source.skipped
            seq = self.first_sequence + self._seq
            self._seq += 1
            self.metrics.frames_in.add()
            if slot is None and target is not None:
                self._count_drop()  # read into scratch: no slot was free
                continue
            if slot is None or image is not slot.array:
                slot = self._place(image, slot)
                if slot is None:
                    self._count_drop()
                    continue
            frame = Frame(spec.stream_id, seq, timestamp, captured, slot.array, slot, source=self._frame_source())
            if not self.queue.put(frame, self.stop):
                frame.release()
                return
            self.metrics.dropped = self.queue.dropped + self._local_drops

    def _frame_source(self) -> str:
        """The frame's own source (an image file) or the source's URI, credentials redacted."""
        own = self.source.frame_source()
        return self.display_uri if own is None else redact_uri(own)

    def _place(self, image: np.ndarray, slot: FrameSlot | None) -> FrameSlot | None:
        """The decoder wrote somewhere else (first frame, size change): copy into a pool slot."""
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise SourceError(f"{self.display_uri}: frames must be 8-bit BGR, got {image.dtype} {image.shape}")
        shape = (int(image.shape[0]), int(image.shape[1]), 3)
        if self.pool is None or self.pool.shape != shape:
            if slot is not None:
                slot.release()
            self._ensure_pool(shape)
            slot, stopped = self._acquire_slot()
            if stopped or slot is None:
                return None
        elif slot is None:
            return None
        np.copyto(slot.array, image)
        self.copies.add("host_to_host", image.nbytes)
        self.metrics.copies += 1
        return slot

    def _reconnect(self, reason: str, why: HealthReason | None = None) -> bool:
        """Close, then reopen with jittered backoff. Returns False when stopped first."""
        self.metrics.health.set(CameraState.RECONNECTING, why or HealthReason.END_OF_STREAM)
        self.metrics.connected = False
        self.metrics.outages += 1
        error = redact(reason)
        self.metrics.set_error(error)
        started = time.monotonic()
        _log.warning("%s: stream lost (%s); reconnecting", self.source.stream_id, error)
        self.source.close()
        delay = self.backoff.next_delay()
        if self.stop.wait(delay):
            return False
        ok = self._open(reopening=True)
        if ok:
            self.metrics.reconnects += 1
            self.metrics.outage_seconds += time.monotonic() - started
            _log.info("%s: reconnected after %.1fs", self.source.stream_id, time.monotonic() - started)
        return ok


def _failure_reason(exc: BaseException) -> HealthReason:
    """The reason of an error that ends a source without a reason of its own."""
    text = str(exc).lower()
    if "no such" in text or "not found" in text:
        return HealthReason.NOT_FOUND
    if "frames must be" in text or "decode" in text or "not a readable" in text:
        return HealthReason.DECODE_ERROR
    return HealthReason.UNREACHABLE


def _end_reason(runner: SourceRunner) -> HealthReason | None:
    """A source that stopped on its own: at its end (a file), or at ``max_frames`` (no reason)."""
    if runner.max_frames is not None and runner._seq >= runner.max_frames:
        return None
    return HealthReason.END_OF_STREAM
