"""Pinned host blocks kept for reuse instead of freed at once.

``cudaFreeHost`` synchronizes the device and holds the driver while it unpins the pages: freeing a
removed 1280x720 camera's pool (190 MB in the H200 bench) in one go stalled every other stream of the pipeline
for up to 2.5 s on an H200, long enough for live cameras to drop frames. So a block whose last array goes
is put here, keyed by its size and kind, and a new block of the same size takes it back (a replaced or
re-added camera of the same size allocates nothing). A reaper thread frees what is over the limit, and
what has sat unused for ``idle_s``, one block at a time with a pause between frees, so the memory goes
back to the system without a stall (and RSS does not grow with every change of cameras).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["PinnedCache", "PinnedCacheStats"]

_log = logging.getLogger(__name__)
Key = tuple[int, bool, int]  # bytes, mapped, device ordinal


class PinnedCacheStats(NamedTuple):
    """What is held for reuse."""

    blocks: int
    nbytes: int


class PinnedCache:
    """Blocks by key, oldest first; ``free(ptr)`` releases one (``cudaFreeHost``).

    ``put`` may run inside a garbage collection (a block's ``__del__``), so the lock is re-entrant and
    nothing here waits while holding it."""

    def __init__(
        self,
        free: Callable[[int], None],
        *,
        limit_bytes: int = 512 << 20,
        idle_s: float = 30.0,
        pause_s: float = 0.01,
    ) -> None:
        self._free_fn = free
        self.limit_bytes, self.idle_s, self.pause_s = limit_bytes, idle_s, pause_s
        self._lock = threading.RLock()
        self._blocks: dict[Key, list[tuple[int, int, float]]] = {}  # key -> [(ptr, device ptr, since)]
        self._bytes = 0
        self._wake = threading.Event()
        self._reaper: threading.Thread | None = None
        self.freed = 0  # blocks given back to the system so far

    def take(self, nbytes: int, mapped: bool, ordinal: int) -> tuple[int, int] | None:
        """A cached block of exactly this size and kind: (host pointer, device pointer), or None."""
        self._start()
        with self._lock:
            free = self._blocks.get((nbytes, mapped, ordinal))
            if not free:
                return None
            ptr, device_ptr, _ = free.pop()  # the newest: its pages are the likeliest still warm
            self._bytes -= nbytes
            return ptr, device_ptr

    def put(self, nbytes: int, mapped: bool, ordinal: int, ptr: int, device_ptr: int) -> None:
        """Keep a block that nobody uses any more (the reaper frees it when over the limit or idle)."""
        with self._lock:
            self._blocks.setdefault((nbytes, mapped, ordinal), []).append((ptr, device_ptr, time.monotonic()))
            self._bytes += nbytes
            over = self._bytes > self.limit_bytes
        if over:
            self._wake.set()

    def stats(self) -> PinnedCacheStats:
        with self._lock:
            return PinnedCacheStats(sum(len(v) for v in self._blocks.values()), self._bytes)

    def _start(self) -> None:
        if self._reaper is None:
            with self._lock:
                if self._reaper is None:
                    self._reaper = threading.Thread(target=self._reap, name="edgefleet-pinned-reaper", daemon=True)
                    self._reaper.start()

    def _oldest(self, now: float) -> int | None:
        """Take out the block to free next: the oldest, when over the limit or idle too long."""
        with self._lock:
            best: Key | None = None
            for key, free in self._blocks.items():
                if free and (best is None or free[0][2] < self._blocks[best][0][2]):
                    best = key
            if best is None:
                return None
            since = self._blocks[best][0][2]
            if self._bytes <= self.limit_bytes and now - since < self.idle_s:
                return None
            ptr, _, _ = self._blocks[best].pop(0)
            self._bytes -= best[0]
            return ptr

    def _reap(self) -> None:
        while True:
            self._wake.wait(min(1.0, self.idle_s / 4))
            self._wake.clear()
            while (ptr := self._oldest(time.monotonic())) is not None:
                try:
                    self._free_fn(ptr)
                except Exception:  # a free that fails loses that block, not the reaper
                    _log.debug("cudaFreeHost(%#x) failed", ptr, exc_info=True)
                self.freed += 1
                time.sleep(self.pause_s)
