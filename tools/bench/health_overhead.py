#!/usr/bin/env python3
"""What per-camera health and the latency histograms (issue 18) cost per frame, side by side with the code
path before them (``edgefleet.sdk._metrics.TRACKING = False``) in one run. Prints one JSON object.

Usage: .venv/bin/python tools/bench/health_overhead.py [--streams 8] [--fps 30] [--seconds 8] [--pairs 3]
           [--model models/nanodet-m] [--device cpu] [--size 320x240] [--out FILE]

Two measurements:

``pipeline``: the same pipeline (``--streams`` synthetic live cameras at ``--fps``, the model on
``--device``) runs ``--pairs`` times with tracking on and off, interleaved (on, off, on, off, ...); each run
is measured for ``--seconds`` after a warm-up: process CPU seconds per result. ``overhead_ratio`` is the
median CPU per result with tracking over the median without, minus one. On shared cores this is noisy:
``spread`` gives each side's min..max.

``per_frame``: the tracking work a frame causes (one ``SourceHealth.frame``, three histogram observations:
queue wait, end-to-end, the stream's latency; the per-batch stage observations spread over the batch),
timed directly over 200,000 frames, and as a share of the pipeline's CPU per result measured above with
tracking off. The goal is <= 2 % of the pipeline's CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "bench"))

from _harness import load, machine  # noqa: E402


def _run(args: argparse.Namespace, tracking: bool) -> dict[str, Any]:
    from edgefleet.sdk import Pipeline, _metrics

    _metrics.TRACKING = tracking  # read when the pipeline's metrics are built
    w, h = (int(v) for v in args.size.split("x"))
    sources = [f"cam{i}=synthetic:?fps={args.fps}&width={w}&height={h}" for i in range(args.streams)]
    p = Pipeline(args.model, sources, device=args.device, max_batch=args.streams, on_result=lambda r: None)
    p.start()
    try:
        time.sleep(args.warmup)
        r0, f0, c0, t0 = p.stats().results, p.stats().frames_in, time.process_time(), time.monotonic()
        time.sleep(args.seconds)
        st = p.stats()
        cpu, wall = time.process_time() - c0, time.monotonic() - t0
        results, frames = st.results - r0, st.frames_in - f0
        states = sorted({s.state.value for s in st.streams.values()})
    finally:
        p.abort()
        p.close()
        _metrics.TRACKING = True
    return {
        "tracking": tracking,
        "results": results,
        "frames_in": frames,
        "results_per_s": round(results / wall, 1),
        "cpu_s": round(cpu, 3),
        "cpu_ms_per_result": round(cpu / results * 1000, 4) if results else None,
        "cpu_cores_busy": round(cpu / wall, 2),
        "stream_states": states,
    }


def _per_frame_ns(batch: int, n: int = 200_000) -> float:
    """The tracking calls one frame causes, timed alone (ns per frame)."""
    from edgefleet.sdk._health import SourceHealth
    from edgefleet.sdk._histogram import LatencyHistogram

    health = SourceHealth(5.0)
    queue, e2e, stream, stages = LatencyHistogram(), LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    values = [0.0004 * (i % 50) for i in range(1000)]
    t0 = time.perf_counter_ns()
    for i in range(n):
        v = values[i % 1000]
        health.frame(time.monotonic())
        queue.observe(v)
        e2e.observe(v)
        stream.observe(v)
        if i % batch == 0:  # preprocess, infer, postprocess, sinks: once per batch
            for _ in range(4):
                stages.observe(v)
    return (time.perf_counter_ns() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--model", default=str(ROOT / "models" / "nanodet-m"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    runs = []
    for _ in range(args.pairs):
        runs.append(_run(args, True))
        runs.append(_run(args, False))
    on = [r["cpu_ms_per_result"] for r in runs if r["tracking"] and r["cpu_ms_per_result"]]
    off = [r["cpu_ms_per_result"] for r in runs if not r["tracking"] and r["cpu_ms_per_result"]]
    off_ms = statistics.median(off)
    ns = statistics.median(_per_frame_ns(args.streams) for _ in range(3))
    frames_per_result = statistics.median(r["frames_in"] / r["results"] for r in runs if r["results"])
    share = ns * frames_per_result / (off_ms * 1e6)
    out = {
        "bench": "health_overhead",
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": machine(),
        "load": load(),
        "pipeline": {
            "runs": runs,
            "cpu_ms_per_result_tracking": statistics.median(on),
            "cpu_ms_per_result_without": off_ms,
            "overhead_ratio": round(statistics.median(on) / off_ms - 1, 4),
            "spread": {"tracking": [min(on), max(on)], "without": [min(off), max(off)]},
        },
        "per_frame": {
            "tracking_ns_per_frame": round(ns, 1),
            "frames_per_result": round(frames_per_result, 3),
            "share_of_pipeline_cpu": round(share, 5),
            "goal": 0.02,
            "meets_goal": share <= 0.02,
        },
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
