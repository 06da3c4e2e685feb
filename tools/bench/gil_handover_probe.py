#!/usr/bin/env python3
"""How long a thread back from a GIL-free wait waits for the GIL while another thread runs Python, and
whether that other thread giving the GIL away now and then (``time.sleep(0)``) shortens it. Prints one JSON.

    python3 tools/bench/gil_handover_probe.py --out bench/results/gil-handover-cpu.json

The shape of a 64-stream GPU pipeline's problem, without a GPU: a "worker" thread sleeps 2 ms with the
GIL released (an inference call waiting for the GPU) 600 times; a "busy" thread runs pure Python in
bursts of 1.5 ms every 4 ms (a result thread's batch). The figure is how much longer than 2 ms each
sleep took (the wait to take the GIL back, plus the timer's own slack, which the ``alone`` setting,
without the busy thread, measures). ``offers`` settings: the busy thread calls ``time.sleep(0)`` every
``--chunk`` loop iterations of its bursts (about 0.05 ms of Python each on a 2020s x86 core).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import emit, load, machine  # type: ignore[import-not-found,unused-ignore]

WAIT_S = 0.002  # the worker's GIL-free wait
BURST_S = 0.0015  # the busy thread's Python, then
PAUSE_S = 0.004  # its pause (blocked, GIL released)


def run(setting: str, chunk: int, waits: int) -> dict[str, float]:
    stop = threading.Event()

    def busy() -> None:
        n = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < BURST_S:
                for _ in range(chunk):
                    n += 1
                if setting == "offers":
                    time.sleep(0)
            time.sleep(PAUSE_S)

    other = threading.Thread(target=busy, daemon=True)
    if setting != "alone":
        other.start()
    late = []
    try:
        for _ in range(waits):
            t0 = time.perf_counter()
            time.sleep(WAIT_S)
            late.append((time.perf_counter() - t0 - WAIT_S) * 1e6)
    finally:
        stop.set()
        if other.is_alive():
            other.join()
    late.sort()
    return {
        "p50_us": round(late[len(late) // 2], 1),
        "mean_us": round(statistics.mean(late), 1),
        "p90_us": round(late[int(len(late) * 0.9)], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunk", type=int, default=2000, help="busy-loop iterations between two offers")
    ap.add_argument("--waits", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if min(args.chunk, args.waits, args.repeats) < 1:
        ap.error("--chunk, --waits and --repeats take positive numbers")
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in ("alone", "busy", "offers")}
    for _ in range(args.repeats):  # interleaved, so the machine's load hits each alike
        for setting, figures in runs.items():
            figures.append(run(setting, args.chunk, args.waits))
    out: dict[str, Any] = {
        "bench": "gil-handover",
        "command": " ".join(sys.argv),
        "machine": machine(),
        "load_at_start": load(),
        "python": sys.version.split()[0],
        "switch_interval_s": sys.getswitchinterval(),
        "chunk": args.chunk,
        "runs": runs,
        "median_mean_us": {s: statistics.median(r["mean_us"] for r in v) for s, v in runs.items()},
    }
    emit(out, args.out)


if __name__ == "__main__":
    main()
