#!/usr/bin/env python3
"""What the analytics stages cost the pipeline's process per frame: run there, or in the analytics process
(``analytics_process``). Prints one JSON.

    .venv/bin/python tools/bench/analytics_wire_bench.py --out bench/results/analytics-wire-cpu.json

At 64 streams on a GPU the pipeline is bound by the Python work of its threads under one GIL, so what
counts is the time the stages keep the pipeline's process busy. The input is NanoDet-m's real detections
of the committed clip (its first 300 frames, decoded once in this run), fanned out to S streams and cut
into batches of 4 frames per stream (S x 4 results: what the result thread takes at once when batches
wait for it; ``--frames-per-stream 1 --batch-streams 32`` gives the batches of a 64-stream GPU pipeline
instead: one frame of each of 32 streams); the stages are ``track`` + gpu_bench's zone and line.
Figures per frame, each the median of ``--repeats`` passes over every batch:

* ``in_process_us``: the stages run here (``AnalyticsRunner.process``);
* ``main_side_us``: what the pipeline's process does with the analytics process: the batch to columns and
  pickled, the answer unpickled and attached to the results (the answer is made beforehand by the same
  stages, so only this process's share is timed), with its parts ``encode_us``, ``decode_us`` and
  ``apply_us``. As the pipeline does it: a batch straight from the decoder is sent as the decoder's
  columns (made here beforehand, as the decoder does, untimed) and the answer is attached to the results
  in place (they are made again for every pass, untimed);
* ``general_encode_us`` / ``general_apply_us``: the same two parts the general way (the columns joined
  again from the frames' detections; the answer attached to copies), what a batch gets that a stage of
  the pipeline's own process ran on first, or that a shadow holds;
* ``ratio``: in_process_us / main_side_us.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import emit, load, machine  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

from edgefleet.sdk import Pipeline, Result, TrackConfig  # noqa: E402
from edgefleet.sdk._analytics._base import ANALYTICS  # noqa: E402
from edgefleet.sdk._analytics._runner import AnalyticsRunner  # noqa: E402
from edgefleet.sdk._analytics._wire import apply_reply, decode_batch, encode_batch, encode_reply  # noqa: E402
from edgefleet.sdk._decoders import BatchColumns  # noqa: E402
from edgefleet.sdk._detections import Detections, unchecked  # noqa: E402

CLIP = ROOT / "models" / "media" / "vtest-300.mp4"
ZONES = {
    "type": "zones",
    "zones": [{"name": "lower-half", "points": [[0, 0.5], [1, 0.5], [1, 1], [0, 1]], "normalized": True}],
    "lines": [{"name": "middle", "points": [[0.5, 0], [0.5, 1]], "normalized": True}],
}


def _runner(streams: int, labels: tuple[str, ...]) -> AnalyticsRunner:
    r = AnalyticsRunner.build([TrackConfig(), ANALYTICS.coerce(ZONES)])
    r.open([f"cam{s}" for s in range(streams)], ("nanodet-m", "1", labels))
    return r


def _as_decoded(batch: list[Result]) -> tuple[BatchColumns, Any]:
    """The batch's columns as the decoder makes them, and a maker of the batch again with detections that
    are views of those columns (the decoder's results)."""
    w = encode_batch(batch)
    c = BatchColumns(w.boxes, w.scores, w.class_ids, w.tables[0], w.label_index, w.offsets)

    def again() -> list[Result]:
        return [
            replace(
                r,
                detections=unchecked(c.boxes[lo:hi], c.scores[lo:hi], c.classes[lo:hi], c.labels, c.index[lo:hi], None),
            )
            for r, lo, hi in zip(batch, c.starts, c.starts[1:], strict=False)
        ]

    return c, again


def _timed(fn: Any, frames: int) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) / frames * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--frames-per-stream", type=int, default=4, help="consecutive frames of a stream in a batch")
    ap.add_argument("--batch-streams", type=int, default=0, help="streams in a batch (0: all of them)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with Pipeline(ROOT / "models" / "nanodet-m", [f"a={CLIP}"], max_batch=8, max_frames=300) as p:
        clip: list[Result] = list(p.results(timeout=600))
    first = clip[0].detections
    assert isinstance(first, Detections)
    labels = first.label_table
    per, width = args.frames_per_stream, args.batch_streams or args.streams
    if per < 1 or width < 1:
        ap.error("--frames-per-stream and --batch-streams take positive numbers")
    groups = [range(g, min(g + width, args.streams)) for g in range(0, args.streams, width)]
    batches = [
        [replace(clip[j], stream_id=f"cam{s}") for j in range(k, min(k + per, len(clip))) for s in group]
        for k in range(0, len(clip), per)
        for group in groups
    ]
    frames = sum(len(b) for b in batches)
    # the analytics process's answers, made once (its own cost is not this process's)
    worker, sent = _runner(args.streams, labels), {}
    answers = []
    for b in batches:
        given = decode_batch(encode_batch(b))
        answers.append(pickle.dumps(encode_reply(given, worker.process(given), sent), protocol=5))
    decoded = [_as_decoded(b) for b in batches]
    runs: dict[str, list[float]] = {
        k: []
        for k in (
            "in_process_us", "main_side_us", "encode_us", "decode_us", "apply_us", "general_encode_us",
            "general_apply_us",
        )
    }  # fmt: skip
    for _ in range(args.repeats):
        here = _runner(args.streams, labels)
        runs["in_process_us"].append(_timed(lambda: [here.process(b) for b in batches], frames))  # noqa: B023
        wires = [encode_batch(b) for b in batches]
        replies = [pickle.loads(a) for a in answers]
        runs["general_encode_us"].append(
            _timed(lambda: [pickle.dumps(("process", ("a", "b"), encode_batch(b)), 5) for b in batches], frames)
        )
        fresh = [again() for _, again in decoded]
        runs["encode_us"].append(
            _timed(
                lambda: [
                    pickle.dumps(("process", ("a", "b"), encode_batch(b, c)), 5)
                    for b, (c, _) in zip(fresh, decoded, strict=True)  # noqa: B023
                ],
                frames,
            )
        )
        runs["decode_us"].append(_timed(lambda: [pickle.loads(a) for a in answers], frames))
        last: dict[str, Any] = {}
        t0 = time.perf_counter()
        for b, r, w in zip(batches, replies, wires, strict=True):
            apply_reply(b, r, w.offsets, last)
        runs["general_apply_us"].append((time.perf_counter() - t0) / frames * 1e6)
        last = {}
        t0 = time.perf_counter()
        for b, r, w in zip(fresh, replies, wires, strict=True):
            apply_reply(b, r, w.offsets, last, in_place=True)
        runs["apply_us"].append((time.perf_counter() - t0) / frames * 1e6)
        runs["main_side_us"].append(runs["encode_us"][-1] + runs["decode_us"][-1] + runs["apply_us"][-1])
    med = {k: round(statistics.median(v), 2) for k, v in runs.items()}
    emit(
        {
            "bench": "analytics-wire",
            "command": " ".join(sys.argv),
            "machine": machine(),
            "load_at_start": load(),
            "streams": args.streams,
            "frames_per_stream_in_a_batch": per,
            "streams_in_a_batch": width,
            "frames": frames,
            "detections_per_frame": round(sum(len(r.detections) for r in clip) / len(clip), 2),
            "runs": runs,
            "median": med,
            "ratio": round(med["in_process_us"] / med["main_side_us"], 1),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
