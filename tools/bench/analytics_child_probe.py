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
sees every (streams / batch)-th frame of the clip.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
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
from edgefleet.sdk._analytics._wire import decode_batch, encode_reply
T = Counter()
rounds = Counter()
recv = Connection.recv_bytes
def timed_recv(self, *a):
    c = time.thread_time(); b = recv(self, *a); T["socket_read"] += time.thread_time() - c
    return b
Connection.recv_bytes = timed_recv
def timed_send(conn, message):
    c = time.thread_time(); b = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    T["reply_pickle"] += time.thread_time() - c
    c = time.thread_time(); conn.send_bytes(b); T["socket_write"] += time.thread_time() - c
w._send = timed_send
handle = w._handle
def timed_handle(op, request, stages, sent):
    if op != "process":
        return handle(op, request, stages, sent)
    _, keys, batch = request
    rounds[max(Counter(batch.streams).values())] += 1
    c = time.thread_time(); given = decode_batch(batch); T["batch_off_wire"] += time.thread_time() - c
    results = given
    for key in keys:
        c = time.thread_time(); results = stages[key].process(results)
        T["stage " + key.rsplit("-", 1)[0]] += time.thread_time() - c
    c = time.thread_time()
    reply = encode_reply(given, results, sent.setdefault(tuple(keys), {}))
    figures = {key: dict(stages[key].stats()) for key in keys}
    T["reply_onto_wire"] += time.thread_time() - c
    T["batches"] += 1
    return (reply, figures)
w._handle = timed_handle
def dump():
    out = {k: v for k, v in T.items()}
    out["whole_process_with_its_start"] = time.process_time()
    out["rounds_per_batch"] = {str(k): v for k, v in rounds.items()}
    with open(os.environ["PROBE_OUT"], "w", encoding="utf-8") as f:
        json.dump(out, f)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--frames", type=int, default=300, help="per stream")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if min(args.streams, args.batch, args.frames) < 1:
        ap.error("--streams, --batch and --frames take positive numbers")
    register_backend("bench-replay", path_bench.ReplayConfig, path_bench.ReplayBackend, replace=True)
    recorded = path_bench.record()
    with tempfile.TemporaryDirectory(prefix="child-probe-") as tmp:
        figures_path = Path(tmp) / "child.json"
        os.environ["PROBE_OUT"] = str(figures_path)  # the analytics process inherits the environment
        _remote._START = _PROBE
        run = path_bench.run_once(args.streams, args.batch, args.frames, "with_process_inline")
        if not figures_path.exists():
            raise SystemExit("the analytics process wrote no figures")
        child = figures(figures_path)
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
            "pipeline": run,
            "load_at_end": load(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
