"""A source removed from (or replaced in) a running pipeline gives its frame memory back when
``remove_source``/``replace_source`` returns: every slot buffer of its pool is freed at once, not at some
later garbage collection (the H200 run of ``tools/bench/live_changes_bench.py`` grew by one 1280x720
pool, ~200 MB, at a time). The cyclic collector is off while the changes run, so that a slot freed only
by it counts as kept.

The sources added live are synthetic test patterns whose pool allocator (the ``frame_allocator`` seam a
source has) counts the buffers it made that are still alive."""

from __future__ import annotations

import collections
import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from edgefleet.sdk import Pipeline, Result, register_source
from edgefleet.sdk._frames import Allocator, Frame, FramePool, host_allocator, live_frame_memory
from edgefleet.sdk._sources import SOURCES, SourceSpec
from edgefleet.sdk._sources._configs import SyntheticConfig
from edgefleet.sdk._sources._synthetic import SyntheticSource

CAMS = [f"c{i}=synthetic:?width=64&height=48&fps=30&queue=16" for i in range(4)]
ZONES = {"type": "zones", "zones": [{"name": "door", "points": [[0, 0], [30, 0], [30, 30]]}]}


class Buffers:
    """The slot buffers each tracked source made, by source: (stream id, serial) -> made, still alive."""

    def __init__(self) -> None:
        self.made: collections.Counter[tuple[str, int]] = collections.Counter()
        self.alive: collections.Counter[tuple[str, int]] = collections.Counter()
        self.lock = threading.Lock()
        self.serial = 0

    def allocator(self, stream_id: str, default: Allocator) -> Allocator:
        with self.lock:
            self.serial += 1
            key = (stream_id, self.serial)

        def allocate(shape: tuple[int, ...]) -> np.ndarray:
            array = default(shape)
            with self.lock:
                self.made[key] += 1
                self.alive[key] += 1
            weakref.finalize(array, self._freed, key)
            return array

        return allocate

    def _freed(self, key: tuple[str, int]) -> None:
        with self.lock:
            self.alive[key] -= 1

    def kept(self, stream_id: str) -> int:
        """Buffers of ``stream_id``'s sources still alive, the running one's excepted (its latest)."""
        with self.lock:
            keys = sorted(k for k in self.made if k[0] == stream_id)
            return sum(self.alive[k] for k in keys[:-1])

    def live(self, stream_id: str) -> int:
        with self.lock:
            return sum(n for k, n in self.alive.items() if k[0] == stream_id)

    def sources(self, stream_id: str) -> int:
        with self.lock:
            return sum(1 for k in self.made if k[0] == stream_id)


class TrackedConfig(SyntheticConfig):
    type: Literal["test-tracked"] = "test-tracked"  # type: ignore[assignment]
    close_s: float = 0.0  # how long closing takes (a camera whose connection is slow to shut)


class TrackedSource(SyntheticSource):
    def __init__(self, spec: SourceSpec, buffers: Buffers) -> None:
        super().__init__(spec)
        assert isinstance(spec.config, TrackedConfig)
        self.close_s = spec.config.close_s
        self.buffers = buffers

    def frame_allocator(self, default: Allocator) -> Allocator:
        return self.buffers.allocator(self.stream_id, default)

    def close(self) -> None:
        if self.close_s:
            time.sleep(self.close_s)


@pytest.fixture
def buffers() -> Iterator[Buffers]:
    """The ``test-tracked`` source kind, registered with its own buffer count for this test."""
    counted = Buffers()
    register_source("test-tracked", TrackedConfig, lambda config, spec: TrackedSource(spec, counted), replace=True)
    yield counted
    SOURCES.unregister("test-tracked")


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The cyclic collector off: what is freed is freed by its last reference going."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


def _cam(stream_id: str, width: int = 160, height: int = 120, **extra: Any) -> dict[str, Any]:
    return {"type": "test-tracked", "id": stream_id, "width": width, "height": height, "fps": 30, **extra}


def _ignore(result: Result) -> None:
    pass


def _run(p: Pipeline, body: Callable[[Pipeline], None]) -> None:
    p.start()
    try:
        time.sleep(0.5)
        body(p)
    finally:
        p.stop()
        p.close()
    assert p.error is None


@pytest.mark.usefixtures("no_gc")
def test_a_pool_let_go_of_frees_its_slots_without_the_collector(buffers: Buffers) -> None:
    pool = FramePool((48, 64, 3), 4, buffers.allocator("p", host_allocator))
    slot = pool.acquire(0.0)
    assert slot is not None
    frame = Frame("p", 0, 0.0, 0.0, slot.array, slot)
    del slot, pool
    assert buffers.live("p") == 1  # the free slots went with the pool; the frame keeps its own
    frame.release()  # into a pool that is gone: nothing to give back to
    del frame
    assert buffers.live("p") == 0


@pytest.mark.usefixtures("no_gc")
@pytest.mark.parametrize("analytics_thread", [False, True], ids=["analytics-inline", "analytics-thread"])
def test_removed_and_replaced_sources_free_every_slot_at_once(
    toy_models: dict[str, Path], buffers: Buffers, analytics_thread: bool
) -> None:
    def cycles(p: Pipeline) -> None:
        for cycle in range(4):
            x = f"x{cycle}"
            p.add_source(_cam(x))
            time.sleep(0.3)
            assert buffers.live(x) > 0
            p.replace_source(x, _cam(x, width=96, height=64))
            assert buffers.kept(x) == 0, f"{x}: the replaced source's slots are still alive"
            time.sleep(0.3)
            p.remove_source(x)
            assert buffers.live(x) == 0, f"{x}: {buffers.live(x)} slot buffer(s) alive after remove_source"
            assert buffers.sources(x) == 2

    analytics = [{"type": "track"}, ZONES]
    p = Pipeline(
        toy_models["yolo"], CAMS, on_result=_ignore, max_batch=8, analytics=analytics, analytics_thread=analytics_thread
    )
    _run(p, cycles)


@pytest.mark.usefixtures("no_gc")
def test_a_source_removed_with_frames_in_flight_frees_its_slots(toy_models: dict[str, Path], buffers: Buffers) -> None:
    # A slow consumer: the added camera's frames wait in its queue and in the batches when it is removed.
    def slow(result: Result) -> None:
        time.sleep(0.004)

    def body(p: Pipeline) -> None:
        for cycle in range(3):
            x = f"y{cycle}"
            p.add_source(_cam(x, width=320, height=240, fps=200, queue=32))
            time.sleep(0.15)
            assert p.stats().streams[x].results < p.stats().streams[x].frames_in, "nothing was in flight"
            final = p.remove_source(x)
            assert final.results > 0
            assert buffers.live(x) == 0, f"{x}: {buffers.live(x)} slot buffer(s) alive after remove_source"

    _run(Pipeline(toy_models["yolo"], CAMS, on_result=slow, max_batch=4), body)


@pytest.mark.usefixtures("no_gc")
def test_a_source_removed_under_a_sink_that_draws_on_the_frames_frees_its_slots(
    toy_models: dict[str, Path], buffers: Buffers, tmp_path: Path
) -> None:
    pytest.importorskip("av")
    pytest.importorskip("cv2")
    video = {"type": "video", "path": str(tmp_path / "out.mp4")}

    def body(p: Pipeline) -> None:
        for cycle in range(2):
            x = f"v{cycle}"
            p.add_source(_cam(x))
            time.sleep(0.4)
            p.remove_source(x)
            assert buffers.live(x) == 0, f"{x}: {buffers.live(x)} slot buffer(s) alive after remove_source"

    track = [{"type": "track"}]
    _run(Pipeline(toy_models["yolo"], CAMS[:2], on_result=_ignore, sinks=[video], max_batch=4, analytics=track), body)


@pytest.mark.usefixtures("no_gc")
def test_a_source_still_closing_at_removal_frees_its_slots_at_removal(
    toy_models: dict[str, Path], buffers: Buffers
) -> None:
    def body(p: Pipeline) -> None:
        p.add_source(_cam("slow", close_s=1.5))
        time.sleep(0.4)
        t0 = time.monotonic()
        final = p.remove_source("slow", timeout=0.5)
        assert time.monotonic() - t0 < 1.2
        assert final.results > 0
        assert buffers.live("slow") == 0, f"{buffers.live('slow')} slot buffer(s) alive after remove_source"
        time.sleep(1.5)  # it finishes closing; nothing of it comes back
        assert "slow" not in p.stats().streams

    _run(Pipeline(toy_models["yolo"], CAMS[:2], on_result=_ignore, max_batch=4), body)


@pytest.mark.usefixtures("no_gc")  # (nothing an earlier test left is freed in the middle of this one)
def test_the_pools_counter_follows_the_slot_buffers(toy_models: dict[str, Path], buffers: Buffers) -> None:
    before = live_frame_memory()

    def body(p: Pipeline) -> None:
        during = live_frame_memory()
        own = sum(r.pool.size for r in p._runners if r.pool is not None)
        assert (during.pools - before.pools, during.slots - before.slots) == (2, own)
        assert during.bytes - before.bytes == own * 64 * 48 * 3
        assert p.stats().frame_memory == {"pools": 2, "slots": own, "bytes": own * 64 * 48 * 3}
        p.add_source(_cam("z", width=320, height=240))
        time.sleep(0.3)
        added = live_frame_memory()
        assert added.slots - during.slots == buffers.live("z") > 0
        assert added.bytes - during.bytes == buffers.live("z") * 320 * 240 * 3
        assert p.stats().frame_memory["bytes"] == added.bytes - before.bytes
        p.remove_source("z")
        assert live_frame_memory() == during
        assert p.stats().frame_memory["slots"] == own

    _run(Pipeline(toy_models["yolo"], CAMS[:2], on_result=_ignore, max_batch=4), body)
    assert live_frame_memory() == before  # a closed pipeline keeps no slot
