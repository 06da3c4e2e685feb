"""Cumulative latency histograms in seconds (fixed buckets), for Prometheus histograms on the agent: the
percentile windows (``LatencyWindow``) cannot be summed across devices or over time, bucket counts can."""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass

__all__ = ["LATENCY_BUCKETS_S", "HistogramSnapshot", "LatencyHistogram"]

#: upper bounds (seconds) from 1 ms to 10 s: a preprocess step to a capture-to-result latency on a slow CPU
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


@dataclass(frozen=True)
class HistogramSnapshot:
    """``counts[i]``: samples <= ``bounds[i]`` (cumulative, as Prometheus wants); ``count`` includes those
    above the last bound; ``sum`` in seconds."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    count: int
    sum: float


class LatencyHistogram:
    """Counts samples into :data:`LATENCY_BUCKETS_S`. One bisect and two additions per sample."""

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds = bounds
        self._buckets = [0] * (len(bounds) + 1)  # per bucket (not cumulative); the last: above every bound
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        i = bisect_left(self.bounds, seconds)
        with self._lock:
            self._buckets[i] += 1
            self._sum += seconds

    def snapshot(self) -> HistogramSnapshot:
        with self._lock:
            buckets, total = list(self._buckets), self._sum
        cumulative, running = [], 0
        for n in buckets[:-1]:
            running += n
            cumulative.append(running)
        return HistogramSnapshot(self.bounds, tuple(cumulative), running + buckets[-1], total)
