"""The cross-stream batcher: gathers frames from every stream's queue into batches of up to ``max_batch``
frames, waiting at most ``timeout`` after the first frame of a batch (like DeepStream's nvstreammux).

Streams can join and leave a running pipeline (:meth:`Batcher.add`, :meth:`Batcher.retire`): a retired
stream's queue is read to its end, then dropped. With no stream left the batcher waits for one to be
added, until ``stopped`` is set."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from ._frames import Frame, FrameQueue

__all__ = ["Batcher"]


class Batcher:
    def __init__(
        self,
        queues: Sequence[FrameQueue],
        cond: threading.Condition,
        timeout_s: float,
        stopped: threading.Event | None = None,
    ) -> None:
        self.queues = list(queues)
        self.cond = cond
        self.timeout_s = timeout_s
        self.stopped = stopped
        self._retired: set[int] = set()  # ids of queues to drop once finished and empty
        self._rr = 0

    def add(self, queue: FrameQueue) -> None:
        """A stream joins: its frames are batched from now on."""
        with self.cond:
            self.queues.append(queue)
            self.cond.notify_all()

    def retire(self, queue: FrameQueue) -> None:
        """A stream leaves: its queue is read to its end (once finished) and then dropped."""
        with self.cond:
            self._retired.add(id(queue))
            self.cond.notify_all()

    def _prune(self) -> None:
        if self._retired:
            gone = {id(q) for q in self.queues if id(q) in self._retired and q.finished and len(q) == 0}
            if gone:
                self.queues = [q for q in self.queues if id(q) not in gone]
                self._retired -= gone
                self._rr = self._rr % len(self.queues) if self.queues else 0

    def _all_done(self) -> bool:
        self._prune()
        if not self.queues:  # every stream was removed: wait for one to be added, or for the stop
            return self.stopped is None or self.stopped.is_set()
        return all(q.finished and len(q) == 0 for q in self.queues)

    def _take(self, batch: list[Frame], limit: int) -> None:
        """Round-robin across streams so one busy stream cannot starve the others."""
        self._prune()
        n = len(self.queues)
        if n == 0:
            return
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
