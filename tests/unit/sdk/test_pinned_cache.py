"""The pinned-block cache of the GPU path (``sdk/_cuda/_pinned_cache.py``), with a recording ``free`` in
place of ``cudaFreeHost``: blocks come back by size and kind, and the reaper gives back what is over the
limit or idle, oldest first, one at a time, whatever a free does."""

from __future__ import annotations

import threading
import time

from edgefleet.sdk._cuda._pinned_cache import PinnedCache

MB = 1 << 20


class Frees:
    def __init__(self, fail: set[int] | None = None) -> None:
        self.freed: list[int] = []
        self.fail = fail or set()
        self.lock = threading.Lock()

    def __call__(self, ptr: int) -> None:
        with self.lock:
            self.freed.append(ptr)
        if ptr in self.fail:
            raise RuntimeError("cudaErrorInvalidValue")


def _until(done: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_block_of_the_same_size_and_kind_is_taken_back_and_no_other() -> None:
    frees = Frees()
    cache = PinnedCache(frees, idle_s=60.0)
    cache.put(3 * MB, True, 0, 0x1000, 0x9000)
    assert cache.take(3 * MB, False, 0) is None  # another kind (not mapped)
    assert cache.take(3 * MB, True, 1) is None  # another device
    assert cache.take(2 * MB, True, 0) is None  # another size
    assert cache.take(3 * MB, True, 0) == (0x1000, 0x9000)
    assert cache.take(3 * MB, True, 0) is None and tuple(cache.stats()) == (0, 0)
    assert frees.freed == []


def test_what_is_over_the_limit_is_freed_oldest_first_and_the_rest_kept() -> None:
    frees = Frees()
    cache = PinnedCache(frees, limit_bytes=5 * MB, idle_s=60.0, pause_s=0.001)
    cache.take(1, False, 0)  # starts the reaper
    for i in range(8):
        cache.put(MB, False, 0, 0x100 + i, 0)
    assert _until(lambda: cache.stats().nbytes <= 5 * MB)
    time.sleep(0.1)
    assert frees.freed == [0x100, 0x101, 0x102]  # the three oldest, nothing more
    assert cache.stats().blocks == 5 and cache.freed == 3


def test_an_idle_block_is_given_back_and_a_failing_free_does_not_stop_the_reaper() -> None:
    frees = Frees(fail={0xA})
    cache = PinnedCache(frees, idle_s=0.2, pause_s=0.001)
    cache.take(1, False, 0)
    cache.put(MB, False, 0, 0xA, 0)
    cache.put(MB, False, 0, 0xB, 0)
    assert _until(lambda: frees.freed == [0xA, 0xB])
    assert tuple(cache.stats()) == (0, 0)
    cache.put(MB, False, 0, 0xC, 0)
    assert _until(lambda: 0xC in frees.freed)  # still reaping after the failed free
