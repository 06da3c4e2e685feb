"""Frames, the fixed pool of preallocated slots they live in, and the bounded per-stream frame queue.

A source decodes straight into a slot leased from its stream's pool; the frame then travels through the
pipeline as a reference to that slot and the slot returns to the pool when the frame's result has been
delivered. Nothing allocates pixel memory per frame.

A slot refers to its pool weakly, so a pool and its slots make no reference cycle: when a source's runner
lets go of its pool (its source removed from a running pipeline, or a new frame size), the free slots go
with it at once and each slot in flight when its frame is done, not at the next full garbage collection
(which, in a process of many long-lived objects, comes rarely: one 1280x720 pool of pinned slots is
~200 MB). :func:`live_frame_memory` counts the slots alive in the process, for benchmarks and leak tests.
"""

from __future__ import annotations

import enum
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

__all__ = [
    "Frame",
    "FrameMemory",
    "FramePool",
    "FrameQueue",
    "FrameSlot",
    "OverflowPolicy",
    "frame_allocator",
    "host_allocator",
    "live_frame_memory",
]

Allocator = Callable[[tuple[int, ...]], np.ndarray]


def host_allocator(shape: tuple[int, ...]) -> np.ndarray:
    """Plain pageable host memory (the CPU path). The CUDA layer supplies pinned/mapped allocators."""
    return np.empty(shape, dtype=np.uint8)


def frame_allocator(device: str, upload: bool = False) -> Allocator:
    """Host memory for CPU inference; mapped pinned host memory when frames go to a GPU, which the
    preprocessing kernel reads in place (no copy); with ``upload`` on a discrete GPU, pinned memory that
    is uploaded whole, one DMA copy per frame."""
    if device.startswith("cuda"):
        from ._cuda._memory import pinned_allocator  # the CUDA layer, present with the [cuda] extra

        return pinned_allocator(device, upload=upload)
    return host_allocator


@dataclass(frozen=True)
class FrameMemory:
    """Frame-pool memory alive in this process: pools, their slots and the slots' bytes. A slot counts
    until its last reference goes (a frame in flight keeps its slot after its pool is gone)."""

    pools: int = 0
    slots: int = 0
    bytes: int = 0


class _Tally:
    """The process's live pools and slots, updated from ``__init__`` and ``__del__``. Nothing inside the
    lock allocates a container, so no collection (and no ``__del__`` of a slot) can run while it is held
    and find it taken by its own thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pools = self.slots = self.bytes = 0

    def add(self, pools: int, slots: int, nbytes: int) -> None:
        with self.lock:
            self.pools += pools
            self.slots += slots
            self.bytes += nbytes


_TALLY = _Tally()


def live_frame_memory() -> FrameMemory:
    """The frame pools and slots alive in this process now (every pipeline's)."""
    with _TALLY.lock:
        pools = _TALLY.pools
        slots = _TALLY.slots
        nbytes = _TALLY.bytes
    return FrameMemory(pools, slots, nbytes)


class FrameSlot:
    """One preallocated buffer of a pool. ``array`` is the slot's whole memory (H, W, 3) uint8."""

    __slots__ = ("__weakref__", "_nbytes", "_pool", "array", "index", "leased")

    def __init__(self, pool: FramePool, index: int, array: np.ndarray) -> None:
        self._pool = weakref.ref(pool)  # weak: a pool and its slots make no cycle (see the module)
        self.index = index
        self.array = array
        self.leased = False
        self._nbytes = int(getattr(array, "nbytes", 0))
        _TALLY.add(0, 1, self._nbytes)

    def release(self) -> None:
        pool = self._pool()
        if pool is not None:
            pool.release(self)
        else:  # its pool is gone (its source was removed): the slot goes with its frame
            self.leased = False

    def __del__(self, _add: Callable[[int, int, int], None] = _TALLY.add) -> None:
        # (the tally bound here: at interpreter shutdown the module's globals may be gone first)
        if hasattr(self, "_nbytes"):  # (not when __init__ failed before counting it)
            _add(0, -1, -self._nbytes)


class FramePool:
    """A fixed number of frame slots of one shape, allocated once and reused.

    ``acquire`` blocks (with a timeout) when every slot is leased, which is how a file source is
    throttled to the pipeline's pace. ``leases`` is exported as a metric: a leak shows up as a pool that
    never drains.
    """

    def __init__(self, shape: tuple[int, int, int], count: int, allocator: Allocator = host_allocator) -> None:
        if count < 1:
            raise ValueError("a frame pool needs at least one slot")
        self.shape = shape
        self._cond = threading.Condition()
        self._slots = [FrameSlot(self, i, allocator(shape)) for i in range(count)]
        self._free: deque[FrameSlot] = deque(self._slots)
        self.allocations = count
        self.nbytes = sum(s._nbytes for s in self._slots)  # every slot's memory
        _TALLY.add(1, 0, 0)

    def __del__(self, _add: Callable[[int, int, int], None] = _TALLY.add) -> None:
        if hasattr(self, "allocations"):  # (not when __init__ failed before counting it)
            _add(-1, 0, 0)

    def slot_refs(self) -> list[weakref.ref[FrameSlot]]:
        """Weak references to every slot: dead once the pool and every frame in flight let go of it."""
        return [weakref.ref(s) for s in self._slots]

    @property
    def size(self) -> int:
        return len(self._slots)

    @property
    def leases(self) -> int:
        with self._cond:
            return len(self._slots) - len(self._free)

    def try_acquire(self) -> FrameSlot | None:
        with self._cond:
            if not self._free:
                return None
            slot = self._free.popleft()
            slot.leased = True
            return slot

    def acquire(self, timeout: float) -> FrameSlot | None:
        """Lease a free slot, waiting up to ``timeout`` seconds; None when none came free."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._free:
                remaining = deadline - time.monotonic()
                if (remaining <= 0 or not self._cond.wait(remaining)) and not self._free:
                    return None
            slot = self._free.popleft()
            slot.leased = True
            return slot

    def release(self, slot: FrameSlot) -> None:
        with self._cond:
            if not slot.leased:
                return  # releasing twice is harmless: the frame may be released by a sink and at teardown
            slot.leased = False
            self._free.append(slot)
            self._cond.notify()


@dataclass(slots=True, eq=False)
class Frame:
    """A decoded frame: a view of a pool slot plus where and when it came from.

    ``image`` is BGR uint8 (H, W, 3). It is only valid until :meth:`release`; copy it to keep it.
    ``source``: what it was read from, credentials redacted (a folder's frames each name their file).
    """

    stream_id: str
    sequence: int
    timestamp: float
    captured: float
    image: np.ndarray
    slot: FrameSlot | None = None
    released: bool = field(default=False)
    source: str = ""

    @property
    def width(self) -> int:
        return int(self.image.shape[1])

    @property
    def height(self) -> int:
        return int(self.image.shape[0])

    def release(self) -> None:
        if not self.released:
            self.released = True
            if self.slot is not None:
                self.slot.release()


class OverflowPolicy(enum.Enum):
    """What a full frame queue does with a new frame."""

    BLOCK = "block"  # files and image folders: wait; never lose a frame
    DROP_OLDEST = "drop_oldest"  # live sources: discard the oldest queued frame and count it


class FrameQueue:
    """A bounded queue of frames for one stream, feeding the cross-stream batcher.

    All queues of a pipeline share one lock and one condition, ``cond``, on which the batcher waits for
    any of them. A source thread blocked on its full queue waits on the queue's own condition over the
    same lock, so taking a frame wakes that stream's thread only: with one shared condition every take
    and every put woke every blocked source thread, each of which then had to get the GIL back to find
    it had nothing to do (64 file streams: 7 context switches per frame, ``tools/bench/queue_bench.py``).
    """

    def __init__(self, capacity: int, policy: OverflowPolicy, cond: threading.Condition) -> None:
        if capacity < 1:
            raise ValueError("queue capacity must be at least 1")
        self.capacity = capacity
        self.policy = policy
        self._cond = cond
        # over the same lock (a Condition serves as one: it has the lock methods a Condition uses); only
        # this queue's source thread waits on it
        self._not_full = threading.Condition(cast(Any, cond))
        self._items: deque[Frame] = deque()
        self.dropped = 0
        self.accepted = 0  # frames put; accepted - dropped of them reach the batcher
        self.finished = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, frame: Frame, stop: threading.Event, timeout: float = 0.1) -> bool:
        """Queue a frame. BLOCK waits for room (returns False if ``stop`` is set first);
        DROP_OLDEST never waits."""
        with self._cond:
            while len(self._items) >= self.capacity:
                if self.policy is OverflowPolicy.DROP_OLDEST:
                    old = self._items.popleft()
                    old.release()
                    self.dropped += 1
                    break
                if stop.is_set():
                    return False
                self._not_full.wait(timeout)
            self._items.append(frame)
            self.accepted += 1
            self._cond.notify_all()  # the batcher (the source threads wait on their own queues)
            return True

    def pop(self) -> Frame | None:
        """Take the oldest frame without waiting; the caller holds the shared condition."""
        if self._items:
            frame = self._items.popleft()
            self._not_full.notify()
            return frame
        return None

    def drop_oldest(self) -> bool:
        """Discard the oldest queued frame to free its slot (live sources under pool pressure)."""
        with self._cond:
            if not self._items:
                return False
            self._items.popleft().release()
            self.dropped += 1
            self._not_full.notify()
            return True

    def finish(self) -> None:
        with self._cond:
            self.finished = True
            self._cond.notify_all()
            self._not_full.notify_all()
