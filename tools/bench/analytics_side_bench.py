#!/usr/bin/env python3
"""What the analytics process costs the pipeline's result thread, measured where it happens: the real
analytics process, answering batch after batch. Prints one JSON.

    .venv/bin/python tools/bench/analytics_side_bench.py --out bench/results/analytics-side-cpu.json
    # this tree against another one (e.g. a worktree of an older commit), alternated in one run:
    .venv/bin/python tools/bench/analytics_side_bench.py --against /tmp/old --repeats 5 --out ...

``analytics_wire_bench.py`` times each part of the wire on its own, hundreds of times in a row, where
the interpreter and the caches are warm: there a frame costs 5-8 µs. In a pipeline the result thread
does each part once per batch between other work, and a GPU pipeline at 64 streams measured 15-21 µs
a frame more result-thread CPU with analytics than without (docs/gpu.md). This bench does what that
thread does, in its order: NanoDet-m's real detections of the committed clip (first 300 frames) fanned
out to 64 streams, batches of one frame of each of 32 streams (a 64-stream GPU pipeline's), each sent
to the analytics process as the decoder's columns (``track`` + gpu_bench's zone and line), its answer
waited for (off the GIL, as the pipeline polls), taken and attached in place, then counted as delivery
counts it (``label_counts``, ``QualityMeter.add``). Thread CPU time a frame (``time.thread_time``,
the result thread's own, not the process's), by part: ``encode`` (results to columns), ``dumps``
(pickled), ``send`` (the socket write), ``recv`` (the answer read), ``loads`` (unpickled), ``apply``
(attached), ``count`` (the delivery's counting); ``wire`` is the sum of the parts but ``count``, ``side``
of all. ``count_without`` is the same counting of the same batches without analytics, in the same loop
(a pause where the answer would be waited for), so ``side - count_without`` compares with the GPU's
difference. The collector is
off while timing (its young collections are gpu_bench's ``"gc"``); ``--gc`` leaves it on. ``answers``:
the records the answers held a frame, and each answer unpickled again in a row, with and without records.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import emit, load, machine  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from analytics_wire_bench import CLIP, _as_decoded  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

PARTS = ("encode", "dumps", "send", "recv", "loads", "apply", "count")
ZONES = {  # gpu_bench's ANALYTICS["track"]
    "type": "zones",
    "zones": [{"name": "left", "points": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], "normalized": True}],
    "lines": [{"name": "middle", "points": [[0.5, 0], [0.5, 1]], "normalized": True}],
}


class _Timer:
    """Thread CPU seconds by part, gathered by wrapping the functions the result thread calls."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0.0)

    def wrap(self, owner: Any, name: str, part: str) -> None:
        inner = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spent[part] += time.thread_time() - t0

        setattr(owner, name, timed)


def _clip_batches() -> tuple[list[list[Any]], tuple[str, ...]]:
    from edgefleet.sdk import Pipeline

    with Pipeline(ROOT / "models" / "nanodet-m", [f"a={CLIP}"], max_batch=8, max_frames=300) as p:
        clip = list(p.results(timeout=600))
    labels = clip[0].detections.label_table
    groups = [range(0, 32), range(32, 64)]
    return [[replace(r, stream_id=f"cam{s}") for s in g] for r in clip for g in groups], labels


def measure(repeats: int, keep_gc: bool) -> dict[str, Any]:
    """This tree's figures (one process: the wrapped functions are this tree's)."""
    from edgefleet.sdk import TrackConfig
    from edgefleet.sdk._analytics import _remote
    from edgefleet.sdk._analytics._base import ANALYTICS
    from edgefleet.sdk._analytics._runner import AnalyticsRunner
    from edgefleet.sdk._detections import label_counts
    from edgefleet.sdk._quality import QualityMeter

    batches, labels = _clip_batches()
    decoded = [_as_decoded(b) for b in batches]
    frames = sum(len(b) for b in batches)
    timer = _Timer()
    timer.wrap(_remote, "encode_batch", "encode")
    timer.wrap(_remote, "apply_reply", "apply")
    timer.wrap(_remote.Channel, "send", "send")
    timer.wrap(_remote.Channel, "recv", "recv")

    received: list[bytes] = []  # the last repeat's messages from the process, looked into after it

    def kept(raw: bytes) -> Any:
        received.append(raw)
        return pickle.loads(raw)  # our own analytics process

    class _Pickle:  # what _remote calls pickle: dumps and loads timed
        HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
        dumps = staticmethod(pickle.dumps)
        loads = staticmethod(kept)

    timer.wrap(_Pickle, "dumps", "dumps")
    timer.wrap(_Pickle, "loads", "loads")
    _remote.pickle = _Pickle  # type: ignore[assignment]
    runs: dict[str, list[float]] = {k: [] for k in (*PARTS, "wire", "side", "count_without")}
    wait_s = []
    for _ in range(repeats):
        received.clear()
        runner = AnalyticsRunner.build([TrackConfig(), ANALYTICS.coerce(ZONES)], process=True)
        runner.open([f"cam{s}" for s in range(64)], ("nanodet-m", "1", labels))
        quality, plain = QualityMeter(), QualityMeter()
        timer.spent = dict.fromkeys(PARTS, 0.0)
        without = waited = 0.0
        if not keep_gc:
            gc.disable()
        try:
            for columns, again in decoded:
                results = again()
                pending = runner.send(results, columns, owned=True)
                t0 = time.monotonic()
                while not pending.ready(0.01):
                    pass
                pause = time.monotonic() - t0
                waited += pause
                out = pending.take()
                c0 = time.thread_time()
                quality.add("m", out, label_counts(r.detections for r in out))
                timer.spent["count"] += time.thread_time() - c0
                same = again()  # the batch without analytics, counted the same way after a like pause
                time.sleep(pause)
                c0 = time.thread_time()
                plain.add("m", same, label_counts(r.detections for r in same))
                without += time.thread_time() - c0
        finally:
            gc.enable()
            runner.close()
        for part, spent in timer.spent.items():
            runs[part].append(round(spent / frames * 1e6, 3))
        runs["wire"].append(round((sum(timer.spent.values()) - timer.spent["count"]) / frames * 1e6, 3))
        runs["side"].append(round(sum(timer.spent.values()) / frames * 1e6, 3))
        runs["count_without"].append(round(without / frames * 1e6, 3))
        wait_s.append(waited)
    return {
        "frames_per_repeat": frames,
        "us_per_frame": runs,
        "median_us_per_frame": {k: round(statistics.median(v), 2) for k, v in runs.items()},
        "answer_waited_ms_per_batch": round(statistics.median(wait_s) / len(decoded) * 1000, 3),
        "answers": _answers(received, frames),
    }


def _answers(received: list[bytes], frames: int) -> dict[str, Any]:
    """What the last repeat's answers held: their records (zone and line counts, events, ended tracks, made
    again one by one as they are unpickled) a frame, and how long unpickling an answer takes with and without
    records, each loaded again here in a row (warm: a lower bound of the in-pipeline ``loads``)."""
    from edgefleet.sdk._analytics._wire import WireReply

    records = 0
    timed: dict[str, list[float]] = {"with_records": [], "without": []}
    for raw in received:
        t0 = time.perf_counter()
        message = pickle.loads(raw)  # recorded from our own analytics process
        spent = time.perf_counter() - t0
        reply = message[1] if len(message) > 1 else None
        if not isinstance(reply, WireReply):
            continue  # the answer to an open
        n = sum(len(v) for part in (reply.ended, reply.events, reply.regions) for v in part.values())
        records += n
        timed["with_records" if n else "without"].append(spent)
    return {
        "records_per_frame": round(records / max(1, frames), 3),
        "batches": {k: len(v) for k, v in timed.items()},
        "loads_warm_us_per_batch": {k: round(statistics.median(v) * 1e6, 2) if v else None for k, v in timed.items()},
        "loads_warm_us_per_frame_all": round(sum(sum(v) for v in timed.values()) / max(1, frames) * 1e6, 3),
    }


def _tree(path: Path) -> dict[str, str]:
    rev = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "-C", str(path), "status", "--porcelain", "sdk"], capture_output=True, text=True, check=False
    )
    return {"path": str(path), "commit": rev.stdout.strip(), "sdk_changes_uncommitted": bool(dirty.stdout.strip())}


def _run_in(tree: Path, repeats: int, keep_gc: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(tree / p / "src") for p in ("sdk", "edge", "cloud")))
    cmd = [sys.executable, __file__, "--one", "--repeats", str(repeats), *(["--gc"] if keep_gc else [])]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the bench failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--against", type=Path, help="another source tree: each round runs it and this one, alternated")
    ap.add_argument("--gc", action="store_true", help="leave the garbage collector on while timing")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a round, for --against
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats takes a positive number")
    if args.one:
        print(json.dumps(measure(args.repeats, args.gc)))
        return
    result: dict[str, Any] = {
        "bench": "analytics-side",
        "command": " ".join(sys.argv),
        "machine": machine(),
        "load_at_start": load(),
        "streams": 64,
        "streams_in_a_batch": 32,
        "gc_while_timing": args.gc,
    }
    if args.against is None:
        result["this"] = {**_tree(ROOT), **measure(args.repeats, args.gc)}
    else:
        if not (args.against / "sdk" / "src" / "edgefleet").is_dir():
            ap.error(f"--against {args.against}: not an edgefleet source tree (no sdk/src/edgefleet)")
        rounds: dict[str, list[dict[str, Any]]] = {"this": [], "against": []}
        for _ in range(args.repeats):  # alternated, so a change in the machine's load hits both alike
            rounds["against"].append(_run_in(args.against, 1, args.gc))
            rounds["this"].append(_run_in(ROOT, 1, args.gc))
        for name, tree in (("this", ROOT), ("against", args.against)):
            per = {k: [r["us_per_frame"][k][0] for r in rounds[name]] for k in rounds[name][0]["us_per_frame"]}
            result[name] = {
                **_tree(tree),
                "us_per_frame": per,
                "median_us_per_frame": {k: round(statistics.median(v), 2) for k, v in per.items()},
                "answers": rounds[name][-1]["answers"],  # the last round's
            }
        a, b = result["against"]["median_us_per_frame"], result["this"]["median_us_per_frame"]
        result["wire_ratio_against_over_this"] = round(a["wire"] / b["wire"], 2)
        result["side_ratio_against_over_this"] = round(a["side"] / b["side"], 2)
    emit(result, args.out)


if __name__ == "__main__":
    main()
