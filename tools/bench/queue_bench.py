"""What blocked source threads cost the rest of a pipeline (prints one JSON document).

    python tools/bench/queue_bench.py [--streams 64] [--seconds 3] [--batch 32] [--work-ms 2] [--out FILE]

S source threads put frames into their bounded queues (blocking when full, as file sources do) as fast
as they can; one batcher thread takes batches of up to ``--batch`` through the pipeline's own
:class:`Batcher` and, for each batch, does ``--work-ms`` of pure-Python work, standing in for a pipeline
stage that needs the GIL. Reported: frames/s through the batcher, how long that fixed work took with the
source threads around (``work_inflation``: its median time over its time alone; 1.0 means no one got in
its way) and the process's context switches per frame. No GPU, no decoding: only the queues, the
batcher and the GIL. Run it with two versions of the SDK on PYTHONPATH to compare them.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import emit, load, machine


def _spin(n: int) -> int:
    acc = 0
    for i in range(n):
        acc += i & 7
    return acc


def _calibrate(work_ms: float) -> tuple[int, float]:
    """Iterations of _spin that take about ``work_ms`` alone, and their median time alone (s)."""
    n = 10_000
    while True:
        t0 = time.perf_counter()
        _spin(n)
        dt = time.perf_counter() - t0
        if dt >= work_ms / 1e3 / 4:
            break
        n *= 2
    n = max(1, int(n * (work_ms / 1e3) / dt))
    alone = []
    for _ in range(21):
        t0 = time.perf_counter()
        _spin(n)
        alone.append(time.perf_counter() - t0)
    return n, statistics.median(alone)


def run(streams: int, seconds: float, batch: int, work_ms: float) -> dict[str, Any]:
    from edgefleet.sdk._batcher import Batcher
    from edgefleet.sdk._frames import Frame, FrameQueue, OverflowPolicy

    n_spin, alone = _calibrate(work_ms)
    cond = threading.Condition()
    stop = threading.Event()
    queues = [FrameQueue(4, OverflowPolicy.BLOCK, cond) for _ in range(streams)]
    image = np.zeros((4, 4, 3), np.uint8)

    def produce(q: FrameQueue, sid: str) -> None:
        seq = 0
        while not stop.is_set():
            if not q.put(Frame(sid, seq, 0.0, 0.0, image), stop):
                return
            seq += 1

    threads = [threading.Thread(target=produce, args=(q, f"s{i}"), daemon=True) for i, q in enumerate(queues)]
    batcher = Batcher(queues, cond, 0.005)
    for t in threads:
        t.start()
    time.sleep(0.2)  # every queue full
    before = resource.getrusage(resource.RUSAGE_SELF)
    frames, work = 0, []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        got = batcher.next_batch(batch, stop)
        frames += len(got or [])
        w0 = time.perf_counter()
        _spin(n_spin)
        work.append(time.perf_counter() - w0)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    stop.set()
    for q in queues:
        q.finish()
    for t in threads:
        t.join(2.0)
    switches = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
    return {
        "streams": streams,
        "frames_per_s": round(frames / elapsed, 1),
        "batches": len(work),
        "work_ms_alone": round(alone * 1e3, 3),
        "work_ms_p50": round(statistics.median(work) * 1e3, 3),
        "work_inflation": round(statistics.median(work) / alone, 2),
        "context_switches_per_frame": round(switches / max(1, frames), 2),
        "cpu_s_per_1000_frames": round(
            1000 * ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) / max(1, frames), 4
        ),
    }


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="16,64")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--work-ms", type=float, default=2.0)
    ap.add_argument("--label", default="", help="a name for this run (e.g. the commit), copied into the output")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import edgefleet.sdk

    doc = {
        "command": "python tools/bench/queue_bench.py " + " ".join(argv),
        "label": args.label,
        "sdk": str(Path(edgefleet.sdk.__file__).parent),
        "machine": machine(),
        "load_at_start": load(),
        "results": [run(int(s), args.seconds, args.batch, args.work_ms) for s in args.streams.split(",")],
    }
    emit(doc, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
