#!/usr/bin/env python3
"""Where the analytics process's CPU goes inside a running pipeline. Prints one JSON.

    .venv/bin/python tools/bench/analytics_child_probe.py --streams 64 --batch 32 --frames 300 \
        --out bench/results/analytics-child-cpu.json

The pipeline is analytics_path_bench's (NanoDet-m with its inference replayed from recorded outputs,
synthetic 768x576 sources, ``[track, zones]`` in the analytics process called from the decoding
thread). The analytics process is started with a wrapper around its request loop that times, in the
process's own CPU time, each ``process`` request's parts: the batch off the wire, each stage, the reply
onto the wire, and the socket reads and writes; it writes them to a file when it exits. Figures: CPU ms
per batch of each part, and how many distinct streams (tracker rounds) the batches held. The replay
backend hands every batch the clip's next frame: with more streams than a batch holds, each stream
sees every (streams / batch)-th frame of the clip. ``--replay N`` also records the process's requests
and runs them N times more in this process, alone (``in_pipeline_over_replayed``: how much more a stage
cost inside the pipeline than on the same requests outside it). gpu_bench's ``--child-probe`` starts
the analytics process of its GPU cells with the same wrapper (:data:`_PROBE`, :func:`figures`).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import analytics_path_bench as path_bench  # type: ignore[import-not-found,unused-ignore]
from _harness import emit, load, machine  # type: ignore[import-not-found,unused-ignore]

from edgefleet.sdk import register_backend
from edgefleet.sdk._analytics import _remote

# the analytics process's start (``python -c``): the worker with its request loop timed; $PROBE_OUT gets the figures
_PROBE = r"""
import atexit, json, os, pickle, time
from collections import Counter
from multiprocessing.connection import Connection
import edgefleet.sdk._analytics._worker as w
T = Counter()
rounds = Counter()
def timed(part, fn):
    def run(*a):
        c = time.thread_time()
        try:
            return fn(*a)
        finally:
            T[part] += time.thread_time() - c
    return run
Connection.recv_bytes = timed("socket_read", Connection.recv_bytes)
pickled = timed("reply_pickle", pickle.dumps)
def send(conn, message):
    conn.send_bytes(pickled(message, pickle.HIGHEST_PROTOCOL))
w._send = timed("reply_pickle_and_socket_write", send)
decode = w.decode_batch
def decode_batch(batch):
    rounds[max(Counter(batch.streams).values())] += 1
    T["batches"] += 1
    return decode(batch)
w.decode_batch = timed("batch_off_wire", decode_batch)
w.encode_reply = timed("reply_onto_wire", w.encode_reply)
build = w.build_stage
def build_stage(config):
    stage = build(config)
    stage.process = timed("stage " + config.type, stage.process)
    return stage
w.build_stage = build_stage
REQUESTS = [] if os.environ.get("PROBE_REQUESTS") else None
handle = w._handle
def recorded(op, request, stages, sent):
    if REQUESTS is not None:
        REQUESTS.append(pickle.dumps((op, request), protocol=pickle.HIGHEST_PROTOCOL))
    return handle(op, request, stages, sent)
w._handle = recorded
def dump():
    out = dict(T)
    out["socket_write"] = out.pop("reply_pickle_and_socket_write", 0.0) - out.get("reply_pickle", 0.0)
    out["whole_process_with_its_start"] = time.process_time()
    out["rounds_per_batch"] = {str(k): v for k, v in rounds.items()}
    with open(os.environ["PROBE_OUT"], "w", encoding="utf-8") as f:
        json.dump(out, f)
    if REQUESTS is not None:
        with open(os.environ["PROBE_REQUESTS"], "wb") as f:
            pickle.dump(REQUESTS, f)
atexit.register(dump)
w.main()
"""


def figures(path: Path) -> dict[str, Any]:
    """What the probed analytics process wrote at its exit: CPU ms per batch of each part, the batches,
    and how many tracker rounds (the most frames of one stream) each held."""
    child = json.loads(path.read_text(encoding="utf-8"))
    batches = child.pop("batches", 0) or 1
    return {
        "batches": batches,
        "rounds_per_batch": child["rounds_per_batch"],
        "cpu_ms_per_batch": {k: round(v / batches * 1000, 3) for k, v in child.items() if isinstance(v, float)},
    }


def replay(requests: list[bytes]) -> dict[str, float]:
    """The recorded requests again, here, through fresh stages (the worker's own ``_handle``), nothing
    else running: each stage's CPU ms per batch."""
    from edgefleet.sdk._analytics import _worker

    spent: dict[str, float] = {}
    stages: dict[str, Any] = {}
    sent: dict[tuple[str, ...], dict[str, object]] = {}
    batches = 0

    def timed(name: str, process: Any) -> Any:
        def run(results: Any) -> Any:
            c = time.thread_time()
            try:
                return process(results)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - c

        return run

    for raw in requests:
        op, request = pickle.loads(raw)  # recorded by this run
        _worker._handle(op, request, stages, sent)
        if op == "open":
            stage = stages[request[1]]
            stage.process = timed("stage " + request[2].type, stage.process)
        batches += op == "process"
    return {k: round(v / max(1, batches) * 1000, 3) for k, v in spent.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--frames", type=int, default=300, help="per stream")
    ap.add_argument(
        "--replay",
        type=int,
        default=0,
        help="then run the analytics process's recorded requests again this many times in this process, "
        "alone: the same stages on the same detections outside the pipeline",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if min(args.streams, args.batch, args.frames) < 1:
        ap.error("--streams, --batch and --frames take positive numbers")
    register_backend("bench-replay", path_bench.ReplayConfig, path_bench.ReplayBackend, replace=True)
    recorded = path_bench.record()
    with tempfile.TemporaryDirectory(prefix="child-probe-") as tmp:
        figures_path = Path(tmp) / "child.json"
        os.environ["PROBE_OUT"] = str(figures_path)  # the analytics process inherits the environment
        requests_path = Path(tmp) / "requests.pickle"
        if args.replay:
            os.environ["PROBE_REQUESTS"] = str(requests_path)
        _remote._START = _PROBE
        run = path_bench.run_once(args.streams, args.batch, args.frames, "with_process_inline")
        if not figures_path.exists():
            raise SystemExit("the analytics process wrote no figures")
        child = figures(figures_path)
        replayed = []
        if args.replay:
            with requests_path.open("rb") as f:
                requests = pickle.load(f)  # written by this run's analytics process
            replayed = [replay(requests) for _ in range(args.replay)]
    extra: dict[str, Any] = {}
    if replayed:
        extra["replayed_cpu_ms_per_batch"] = replayed
        extra["in_pipeline_over_replayed"] = {
            k: round(child["cpu_ms_per_batch"][k] / statistics.median(r[k] for r in replayed), 2) for k in replayed[0]
        }
    emit(
        {
            "bench": "analytics-child",
            "command": " ".join(sys.argv),
            "machine": machine(),
            "load_at_start": load(),
            "streams": args.streams,
            "batch": args.batch,
            "frames_per_stream": args.frames,
            "recorded_frames": recorded,
            **child,
            **extra,
            "pipeline": run,
            "load_at_end": load(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
