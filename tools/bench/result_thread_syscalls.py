#!/usr/bin/env python3
"""The system calls the result thread makes per batch with the analytics process, counted by strace.
Prints one JSON.

    .venv/bin/python tools/bench/result_thread_syscalls.py --out bench/results/result-thread-syscalls.json

Every system call lets go of the GIL and takes it back; at 64 streams on a GPU each taking back waits
behind the source threads, and the wait shows as a slower pipeline (docs/gpu.md), so the result thread
should make as few as it can. The pipeline is ``analytics_path_bench``'s (NanoDet-m's recorded outputs
replayed, synthetic 768x576 frames, ``[track, zones]`` in the analytics process called from the
result thread: ``with_process_inline``); the script runs it under ``strace -f`` and counts the calls
made by the thread named ``edgefleet-post``, by name, per batch. ``futex`` is the GIL and the queues'
conditions; ``poll``, ``read``/``recvfrom``, ``write``/``sendmsg`` are the socket to the process.
Needs ``strace`` (Debian's package).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _child(streams: int, frames: int) -> None:
    """Under strace: run the pipeline; print the result thread's id and the run's figures."""
    sys.path.insert(0, str(HERE))
    import analytics_path_bench as bench  # type: ignore[import-not-found,unused-ignore]

    from edgefleet.sdk import register_backend

    register_backend("bench-replay", bench.ReplayConfig, bench.ReplayBackend, replace=True)
    bench.record()

    def spy() -> None:
        while True:
            for t in threading.enumerate():
                if t.name == "edgefleet-post" and t.native_id:
                    print(f"POST-TID {t.native_id}", flush=True)
                    return
            time.sleep(0.005)

    threading.Thread(target=spy, daemon=True).start()
    figures = bench.run_once(streams, streams, frames, "with_process_inline")
    print("FIGURES " + json.dumps(figures), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=16, help="streams, and frames in a batch")
    ap.add_argument("--frames", type=int, default=150, help="per stream")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.streams, args.frames)
        return
    if shutil.which("strace") is None:
        raise SystemExit("strace is not installed (apt-get install strace)")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.txt"
        cmd = [sys.executable, __file__, "--child", "--streams", str(args.streams), "--frames", str(args.frames)]
        run = subprocess.run(
            ["strace", "-f", "-qq", "-o", str(trace), *cmd], capture_output=True, text=True, check=False
        )
        tid = re.search(r"POST-TID (\d+)", run.stdout)
        figures = re.search(r"FIGURES (.*)", run.stdout)
        if run.returncode or tid is None or figures is None:
            raise SystemExit(f"the traced run failed (exit {run.returncode}): {run.stderr[-2000:]}")
        calls: collections.Counter[str] = collections.Counter()
        for line in trace.read_text().splitlines():
            m = re.match(r"(\d+)\s+(\w+)\(", line)
            if m and m.group(1) == tid.group(1):
                calls[m.group(2)] += 1
    batches = args.frames  # a batch is one frame of every stream
    socket_calls = {"poll", "read", "recvfrom", "write", "sendmsg"}
    out = {
        "bench": "result-thread-syscalls",
        "command": " ".join(sys.argv),
        "streams": args.streams,
        "batches": batches,
        "per_batch": {k: round(v / batches, 2) for k, v in calls.most_common() if v >= batches / 10},
        "socket_calls_per_batch": round(sum(v for k, v in calls.items() if k in socket_calls) / batches, 2),
        "run": json.loads(figures.group(1)),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
