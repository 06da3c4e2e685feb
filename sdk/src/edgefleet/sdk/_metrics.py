"""Pipeline metrics: latency windows, rates, counters, and the immutable snapshots the API returns."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._health import CameraState, HealthReason, SourceHealth
from ._histogram import HistogramSnapshot, LatencyHistogram
from ._quality import VersionQuality

#: Record per-camera health and latency histograms per frame (the default). False: the code path before
#: them, kept as a switch for ``tools/bench/health_overhead.py``, which measures both in one run.
TRACKING = True

__all__ = [
    "CopyCounter",
    "LatencyWindow",
    "PipelineStats",
    "RateMeter",
    "StageMetrics",
    "StageStats",
    "StreamMetrics",
    "StreamStats",
]


class LatencyWindow:
    """The most recent ``size`` samples (milliseconds), for percentiles. Thread-safe."""

    def __init__(self, size: int = 4096) -> None:
        self._buf = np.zeros(size, dtype=np.float64)
        self._size = size
        self._n = 0
        self._lock = threading.Lock()

    def add(self, ms: float) -> None:
        with self._lock:
            self._buf[self._n % self._size] = ms
            self._n += 1

    @property
    def count(self) -> int:
        return self._n

    def percentiles(self, qs: tuple[float, ...] = (50.0, 95.0, 99.0)) -> tuple[float, ...]:
        with self._lock:
            n = min(self._n, self._size)
            if n == 0:
                return tuple(0.0 for _ in qs)
            data = self._buf[:n].copy()
        return tuple(float(v) for v in np.percentile(data, qs))

    def reset(self) -> None:
        with self._lock:
            self._n = 0


class RateMeter:
    """Events per second over a sliding window (default 5 s) plus a lifetime total."""

    def __init__(self, window_s: float = 5.0) -> None:
        self._window = window_s
        self._events: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()
        self.total = 0
        self.started = time.monotonic()

    def add(self, n: int = 1) -> None:
        now = time.monotonic()
        with self._lock:
            self.total += n
            self._events.append((now, n))
            self._trim(now)

    def _trim(self, now: float) -> None:
        while self._events and now - self._events[0][0] > self._window:
            self._events.popleft()

    def rate(self) -> float:
        now = time.monotonic()
        with self._lock:
            self._trim(now)
            count = sum(n for _, n in self._events)
        span = min(self._window, now - self.started)
        return count / span if span > 1e-3 else 0.0


class CopyCounter:
    """Counts copies of frame pixel data, by direction, with bytes. Thread-safe.

    A "copy" is a pixel-preserving transfer of a whole frame (host→host, host→device, device→host);
    resizing into the model input is a transform, not a copy, and is not counted.
    """

    KINDS = ("host_to_host", "host_to_device", "device_to_host", "device_to_device")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.KINDS, 0)
        self._bytes = dict.fromkeys(self.KINDS, 0)

    def add(self, kind: str, nbytes: int) -> None:
        with self._lock:
            self._counts[kind] += 1
            self._bytes[kind] += nbytes

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {"counts": dict(self._counts), "bytes": dict(self._bytes)}


class StageMetrics:
    """Latency of one stage (per item it processes) and how many items it processed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.latency = LatencyWindow()
        self.items = RateMeter()
        self.histogram = LatencyHistogram() if TRACKING else None

    def record(self, seconds: float, items: int = 1) -> None:
        self.latency.add(seconds * 1000.0)
        self.items.add(items)
        if self.histogram is not None:
            self.histogram.observe(seconds)

    def snapshot(self) -> StageStats:
        p50, p95, p99 = self.latency.percentiles()
        hist = self.histogram.snapshot() if self.histogram is not None else None
        return StageStats(self.name, self.items.total, self.items.rate(), p50, p95, p99, hist)


class StreamMetrics:
    """Per-stream counters. Writers: the stream's reader thread and the result stage."""

    def __init__(self, stream_id: str, live: bool, stall_s: float = 5.0) -> None:
        self.stream_id = stream_id
        self.live = live
        #: the stream's state machine (connecting, streaming, stalled, reconnecting, failed, ended)
        self.health = SourceHealth(stall_s)
        self.tracking = TRACKING  # False: no health per frame, no histogram (the benchmark's old path)
        self.latency_histogram = LatencyHistogram() if TRACKING else None
        self.frames_in = RateMeter()
        self.results = RateMeter()
        self.dropped = 0
        self.skipped = 0  # inputs a finite source passed over (a folder's unreadable or non-image files)
        self.reconnects = 0
        self.outages = 0
        self.outage_seconds = 0.0
        self.copies = 0
        self.latency = LatencyWindow()
        self.connected = False
        self.finished = False
        self.failed = False  # ended by an error (``last_error``), not by its end or a stop
        #: what is wrong with the stream now; None while it delivers frames
        self.last_error: str | None = None
        #: the latest error and its wall-clock time, kept after the stream recovers (one tuple: read whole)
        self.recent_error: tuple[str, float] | None = None
        self.model_ref: str | None = None

    def observe_latency(self, ms: float) -> None:
        """One result's capture-to-result latency."""
        self.latency.add(ms)
        if self.latency_histogram is not None:
            self.latency_histogram.observe(ms / 1000.0)

    def set_error(self, text: str) -> None:
        """The stream is failing now, for ``text`` (already redacted)."""
        self.recent_error = (text, time.time())
        self.last_error = text

    def clear_error(self) -> None:
        """The stream delivers frames again: nothing is wrong now; ``recent_error`` stays."""
        self.last_error = None

    def snapshot(self) -> StreamStats:
        p50, p95, p99 = self.latency.percentiles()
        recent = self.recent_error
        health = self.health.snapshot()
        return StreamStats(
            stream_id=self.stream_id,
            live=self.live,
            frames_in=self.frames_in.total,
            results=self.results.total,
            fps=self.results.rate(),
            dropped=self.dropped,
            reconnects=self.reconnects,
            outages=self.outages,
            outage_seconds=round(self.outage_seconds, 3),
            copies=self.copies,
            latency_p50_ms=p50,
            latency_p95_ms=p95,
            latency_p99_ms=p99,
            connected=self.connected,
            finished=self.finished,
            last_error=self.last_error,
            model=self.model_ref,
            failed=self.failed,
            recent_error=recent[0] if recent else None,
            recent_error_at=recent[1] if recent else None,
            skipped=self.skipped,
            state=health.state,
            reason=health.reason,
            state_since=health.since,
            state_seconds=round(health.seconds, 3),
            latency_histogram=self.latency_histogram.snapshot() if self.latency_histogram is not None else None,
        )


@dataclass(frozen=True)
class StageStats:
    name: str
    items: int
    rate: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    histogram: HistogramSnapshot | None = None  # every item's latency in seconds, cumulative buckets


@dataclass(frozen=True)
class StreamStats:
    """One stream in ``Pipeline.stats()``.

    ``last_error`` says what is wrong now and is None while the stream delivers frames: a camera that
    dropped and came back reads as healthy again. What went wrong last stays in ``recent_error`` (its
    time in ``recent_error_at``, Unix seconds) after the stream recovers; ``outages``, ``reconnects`` and
    ``outage_seconds`` count every loss.

    ``state`` is the stream's health (:class:`~edgefleet.sdk.CameraState`), ``reason`` why it is not
    streaming (:class:`~edgefleet.sdk.HealthReason`, None while it streams), ``state_since`` when it
    entered that state (Unix seconds) and ``state_seconds`` how long it has been in it.
    """

    stream_id: str
    live: bool
    frames_in: int
    results: int
    fps: float
    dropped: int
    reconnects: int
    outages: int
    outage_seconds: float
    copies: int
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    connected: bool
    finished: bool
    last_error: str | None
    model: str | None
    failed: bool = False  # the stream ended on an error (last_error says which)
    recent_error: str | None = None  # the latest error, kept after the stream recovers
    recent_error_at: float | None = None  # when recent_error happened (Unix time, seconds)
    skipped: int = 0  # files an image folder passed over (unreadable, or not images), one warning each
    state: CameraState = CameraState.CONNECTING
    reason: HealthReason | None = None
    state_since: float = 0.0
    state_seconds: float = 0.0
    latency_histogram: HistogramSnapshot | None = None  # capture-to-result, seconds, cumulative buckets


@dataclass(frozen=True)
class PipelineStats:
    """A point-in-time view of a running pipeline (``Pipeline.stats()``)."""

    elapsed_s: float
    frames_in: int
    results: int
    fps: float
    dropped: int
    streams: dict[str, StreamStats]
    stages: dict[str, StageStats]
    queues: dict[str, int]
    copies: dict[str, dict[str, int]]
    copies_per_frame: float
    batches: int
    mean_batch: float
    model: str | None
    detections_by_label: dict[str, int] = field(default_factory=dict)
    #: each analytics stage's counters (``AnalyticsStage.stats``), by stage name
    analytics: dict[str, dict[str, float | int]] = field(default_factory=dict)
    #: what the serving version and the one before it saw (``_quality``), by model ref, oldest first
    quality: dict[str, VersionQuality] = field(default_factory=dict)
    #: the frame pools its sources hold now: ``pools``, ``slots``, ``bytes`` (a removed source's go at once)
    frame_memory: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)
