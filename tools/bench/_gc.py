"""The cyclic garbage collector during a benchmark cell: its collections by generation and the time they
took (a collection runs with the GIL held, on whichever thread allocated past the threshold, so at 64
streams a full one stalls every stream), and when each full one started.

    with GcTimer(freeze=False) as collector:
        pipeline.start()
        collector.started()                   # freeze=True: gc.freeze() what the process holds now
        ...                                   # the cell
    collector.summary(frames, lo, hi)         # lo, hi: the steady part, on time.monotonic()
"""

from __future__ import annotations

import gc
import time
from typing import Any

__all__ = ["GcTimer"]


class GcTimer:
    def __init__(self, *, freeze: bool = False) -> None:
        self.freeze = freeze
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.full: list[tuple[float, float]] = []  # (monotonic start, seconds) of each full collection
        self.frozen = 0  # objects gc.freeze() moved out of the collector's reach
        self._t0 = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.monotonic()
            return
        g = int(info["generation"])
        took = time.monotonic() - self._t0
        self.counts[g] += 1
        self.seconds[g] += took
        if g == 2:
            self.full.append((self._t0, took))

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def started(self) -> None:
        """The pipeline has started: with ``freeze``, what the process holds now is never traversed by a
        collection again (until the cell ends)."""
        if self.freeze:
            gc.freeze()
            self.frozen = gc.get_freeze_count()

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)
        if self.frozen:
            gc.unfreeze()  # the next cell freezes what it holds after its own start

    def summary(self, frames: int, lo: float = 0.0, hi: float = 0.0) -> dict[str, Any]:
        """Counts and ms by generation; each full collection's start (seconds from the steady part's
        start) and ms, and the ms of those inside the steady part."""
        return {
            "collections": self.counts,
            "ms": [round(x * 1000, 2) for x in self.seconds],
            "us_per_frame": round(sum(self.seconds) / max(1, frames) * 1e6, 3),
            "full": [(round(t - lo, 2), round(d * 1000, 1)) for t, d in self.full],
            "full_in_steady_ms": round(sum(d for t, d in self.full if lo <= t <= hi) * 1000, 1),
            "frozen": self.frozen,
        }
