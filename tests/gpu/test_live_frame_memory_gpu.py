"""A 1280x720 camera added to and removed from a pipeline on CUDA, five times: its pool of pinned host
slots (``cudaHostAlloc``, one ~2.8 MB block each) is freed by ``remove_source`` itself, so neither the
blocks alive nor the process's RSS grow by a pool per cycle (the H200 run of
``tools/bench/live_changes_bench.py`` grew 5280 -> 7318 MB in ~200 MB steps). The cyclic collector is
off while the changes run: a block freed only by it counts as kept."""

from __future__ import annotations

import gc
import time
import warnings
from pathlib import Path

import psutil
import pytest

from edgefleet.sdk import Pipeline, Result
from edgefleet.sdk._cuda._memory import PINNED_CACHE
from edgefleet.sdk._frames import live_frame_memory

pytestmark = pytest.mark.gpu

CAM = "synthetic:?width=1280&height=720&fps=30"


def _host_blocks() -> int:
    from edgefleet.sdk._cuda._memory import HostBlock

    with warnings.catch_warnings():  # isinstance() on every object touches deprecated proxies (torch's)
        warnings.simplefilter("ignore")
        return sum(1 for o in gc.get_objects() if isinstance(o, HostBlock) and o.ptr)


def _ignore(result: Result) -> None:
    pass


def test_a_removed_camera_frees_its_pinned_slots_on_cuda(ort_cuda: str, nanodet: Path) -> None:
    proc = psutil.Process()
    cams = [f"c{i}={CAM}" for i in range(2)]
    p = Pipeline(nanodet, cams, device=ort_cuda, on_result=_ignore, max_batch=8).start()
    gc.collect()
    gc.disable()
    try:
        time.sleep(1.0)
        blocks, memory, rss = _host_blocks(), live_frame_memory(), proc.memory_info().rss
        cached_before = PINNED_CACHE.stats().nbytes  # (blocks earlier tests' pipelines left for reuse)
        pool_bytes = 0
        for cycle in range(5):
            x = f"x{cycle}"
            p.add_source(f"{x}={CAM}")
            time.sleep(0.5)
            pool_bytes = live_frame_memory().bytes - memory.bytes
            assert pool_bytes > 0 and _host_blocks() > blocks
            p.remove_source(x)
            assert _host_blocks() == blocks, f"{x}: pinned blocks kept after remove_source"
            assert live_frame_memory() == memory
        cached = PINNED_CACHE.stats().nbytes - cached_before
        # the last pool's blocks wait for reuse (each re-added camera took them back), beside a few small
        # buffers the pipeline re-sized for three streams (192 bytes measured)
        assert cached <= pool_bytes + (1 << 20), (cached, pool_bytes)
        grown = proc.memory_info().rss - rss - cached
        # five pools kept would be 5 x pool_bytes; the allocators' own churn is allowed (14 MB measured)
        assert grown < pool_bytes, (grown // 2**20, pool_bytes // 2**20)
    finally:
        gc.enable()
        p.stop()
        p.close()
    assert p.error is None
