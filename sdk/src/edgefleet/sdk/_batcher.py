"""The cross-stream batcher: gathers frames from every stream's queue into batches of up to ``max_batch``
frames, waiting at most ``timeout`` after the first frame of a batch (like DeepStream's nvstreammux)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from ._frames import Frame, FrameQueue

__all__ = ["Batcher"]


class Batcher:
    def __init__(self, queues: Sequence[FrameQueue], cond: threading.Condition, timeout_s: float) -> None:
        self.queues = list(queues)
        self.cond = cond
        self.timeout_s = timeout_s
        self._rr = 0

    def _all_done(self) -> bool:
        return all(q.finished and len(q) == 0 for q in self.queues)

    def _take(self, batch: list[Frame], limit: int) -> None:
        """Round-robin across streams so one busy stream cannot starve the others."""
        n = len(self.queues)
        progressed = True
        while len(batch) < limit and progressed:
            progressed = False
            for k in range(n):
                q = self.queues[(self._rr + k) % n]
                frame = q.pop()
                if frame is not None:
                    batch.append(frame)
                    progressed = True
                    if len(batch) >= limit:
                        self._rr = (self._rr + k + 1) % n
                        return
            self._rr = (self._rr + 1) % n

    def next_batch(self, limit: int, abort: threading.Event) -> list[Frame] | None:
        """The next batch (1..limit frames), or None once every stream has finished and drained (or on
        ``abort``)."""
        batch: list[Frame] = []
        with self.cond:
            while not batch:
                if abort.is_set():
                    return None
                self._take(batch, limit)
                if batch:
                    break
                if self._all_done():
                    return None
                self.cond.wait(0.05)
            deadline = time.monotonic() + self.timeout_s
            while len(batch) < limit and not abort.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._all_done():
                    break
                self.cond.wait(remaining)
                self._take(batch, limit)
        return batch
