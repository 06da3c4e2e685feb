#!/usr/bin/env python3
"""Tracking and analytics benchmark on this machine's CPU. Prints one JSON object.

    .venv/bin/python tools/bench/track_bench.py --out bench/results/track-cpu.json
    .venv/bin/python tools/bench/track_bench.py --compare-python /path/to/venv/bin/python   # + `trackers`
    .venv/bin/python tools/bench/track_bench.py --objects 50 --seeds 1 --pipeline --replay 32 \
        --baseline-tree /tmp/main-checkout --out bench/results/track-cpu-analytics-thread.json

Parts (all in one run):
  cost       ByteTrack (``track``) and ByteTrack + zones and lines (``zones``: 2 zones, 2 lines) per frame
             in CPU time of the calling thread (the machine is shared: wall time is given beside it),
             at 10 / 50 / 200 objects (tests/support/scenes.py: random walkers, detector noise), through
             the stages' ``process`` as a pipeline calls them: one stream per batch, and 8 streams per
             batch (the vectorised path: cost per frame = batch cost / 8). Also the bare tracker on
             arrays (no Result conversion). Goal: <= 1 ms per frame at 50 objects.
  accuracy   MOTA / IDF1 / ID switches on the scripted crossing scene at moderate and heavy noise, seeds
             0-4 (motmetrics), and the line counts of the scripted line scene (exact expected).
  pipeline   (--pipeline) the real pipeline (NanoDet-m on the committed clip, N streams, CPU) without
             analytics, with ``analytics: [track, zones]`` on their own thread (the default), and with them
             on the decoding thread (``analytics_thread=False``), interleaved in this run: fps and CPU
             time per frame of each.
  replay     (--replay S) the 64-stream H200 workload on this CPU: NanoDet-m's real detections of the
             committed clip (decoded once), S streams per batch (the same clip on every stream, as
             gpu_bench runs it), through ``track`` and ``zones`` (gpu_bench's zone and line): CPU ms per
             batch. With --baseline-tree DIR the same in DIR's code (another checkout, e.g. main before a
             change), interleaved, in a child interpreter per round. Also what handing the work to a
             worker process would cost: a batch pickled and unpickled, and its results back.
  real       (--real) NanoDet-m 1.0.0 (416 px, 80 classes) hot-swapped to 2.0.0 (320 px, 6 classes) on the
             committed clip, one stream, the swap asked for after 100, 130, ... 250 frames: person track
             count, mean track length, and at each cut-over the ids kept, restarted and switched against
             the run without a swap (tests/support/track_swap.py says how each is counted); and once
             the same with a swap to the same model under another version (ids must not change at all).
  solver     (--compare-solver) the ``track`` stage's cost with its solver (lap) and with scipy's
             ``linear_sum_assignment`` in its place, side by side (scipy: a development dependency).
  compare    (--compare-python PY) the same cost and accuracy scenes through the ByteTrack of Roboflow's
             ``trackers`` package, run by another interpreter PY that has it installed (it is not a
             dependency of this project: it needs opencv-python, supervision, matplotlib, requests).

Every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import emit, load, machine  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

from edgefleet.sdk._analytics._bytetrack import ByteTracker, FrameDetections  # noqa: E402
from edgefleet.sdk._analytics._regions import ZonesConfig, ZonesStage  # noqa: E402
from edgefleet.sdk._analytics._track import TrackConfig, TrackStage  # noqa: E402
from edgefleet.sdk._results import Detection, Result  # noqa: E402
from tests.support import scenes as S  # noqa: E402, N812

W, H = 1920, 1080
ZONES = {
    "zones": [
        {"name": "left", "points": [[0.05, 0.1], [0.45, 0.1], [0.45, 0.9], [0.05, 0.9]], "normalized": True},
        {"name": "right", "points": [[0.55, 0.1], [0.95, 0.1], [0.95, 0.9], [0.55, 0.9]], "normalized": True},
    ],
    "lines": [
        {"name": "middle", "points": [[960, 0], [960, 1080]]},
        {"name": "across", "points": [[0, 540], [1920, 540]]},
    ],
}
CLASSES = {"person": 0, "car": 2}


def _frames(n: int, frames: int, seed: int) -> list[S.Detections]:
    truth = S.ground_truth(S.random_scene(n, frames, seed=seed), frames, W, H)
    rng = np.random.default_rng(seed)
    return [S.detect(gt, S.Noise(false_per_frame=0.3), rng, W, H) for gt in truth]


def _result(stream: str, seq: int, d: S.Detections) -> Result:
    dets = tuple(
        Detection((float(b[0]), float(b[1]), float(b[2]), float(b[3])), float(s), CLASSES.get(lb, 1), lb)
        for b, s, lb in zip(d.boxes, d.scores, d.labels, strict=True)
    )
    return Result(stream, seq, 1_700_000_000.0 + seq / 30.0, "det", "1.0.0", W, H, 0.0, dets)


def cost(counts: list[int], frames: int, streams: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in counts:
        per_stream = [_frames(n, frames, seed=n * 100 + s) for s in range(streams)]
        row: dict[str, Any] = {"objects": n, "frames": frames}
        for label, batch in (("one_stream_ms", 1), (f"{streams}_streams_per_batch_ms", streams)):
            results = [[_result(f"s{s}", f, per_stream[s][f]) for s in range(batch)] for f in range(frames)]
            track = TrackStage(TrackConfig())
            zones = ZonesStage(ZonesConfig.model_validate(ZONES))
            t_track = t_zones = c_track = c_zones = 0.0
            for batch_results in results:
                t0, c0 = time.perf_counter(), time.thread_time()
                tracked = track.process(batch_results)
                t1, c1 = time.perf_counter(), time.thread_time()
                zones.process(tracked)
                t2, c2 = time.perf_counter(), time.thread_time()
                t_track += t1 - t0
                t_zones += t2 - t1
                c_track += c1 - c0
                c_zones += c2 - c1
            n_frames = frames * batch
            row[label] = {
                "track": round(c_track / n_frames * 1000, 4),
                "track_and_zones": round((c_track + c_zones) / n_frames * 1000, 4),
                "wall_track_and_zones": round((t_track + t_zones) / n_frames * 1000, 4),
                "tracks_started": track.tracker.started,
                "events": zones.engine.events,
            }
        tracker = ByteTracker(TrackConfig().params())
        arrays = [
            FrameDetections("s0", f, f / 30.0, d.boxes, d.scores, np.array([CLASSES.get(lb, 1) for lb in d.labels]))
            for f, d in enumerate(per_stream[0])
        ]
        c0 = time.thread_time()
        for fd in arrays:
            tracker.update([fd])
        row["bare_tracker_ms"] = round((time.thread_time() - c0) / frames * 1000, 4)
        out[str(n)] = row
        print(f"cost {n} objects: {row}", file=sys.stderr)
    return out


def _scene_hyps(
    noise: S.Noise, seed: int
) -> tuple[list[S.Truth], list[tuple[np.ndarray, np.ndarray]], list[S.Detections]]:
    actors, frames, w, h = S.crossing_scene()
    truth = S.ground_truth(actors, frames, w, h)
    rng = np.random.default_rng(seed)
    dets = [S.detect(gt, noise, rng, w, h) for gt in truth]
    stage = TrackStage(TrackConfig())
    hyps = []
    for f, d in enumerate(dets):
        (r,) = stage.process([_result("cam", f, d)])
        tracked = [x for x in r.detections if x.track_id is not None]
        hyps.append((np.array([x.track_id for x in tracked]), np.array([x.box for x in tracked]).reshape(-1, 4)))
    return truth, hyps, dets


NOISE = {
    "moderate": S.Noise(),
    "heavy": S.Noise(jitter=0.05, miss=0.1, false_per_frame=1.0, low_score=0.25),
}


def accuracy(seeds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, noise in NOISE.items():
        runs = [S.mot_metrics(*_scene_hyps(noise, seed)[:2]) for seed in range(seeds)]
        out[name] = _mean(runs)
    actors, frames, w, h, line, want_in, want_out = S.line_scene()
    exact = 0
    for seed in range(seeds):
        truth = S.ground_truth(actors, frames, w, h)
        rng = np.random.default_rng(seed)
        track = TrackStage(TrackConfig())
        zones = ZonesStage(ZonesConfig.model_validate({"lines": [{"name": "gate", "points": line}]}))
        r = None
        for f, gt in enumerate(truth):
            (r,) = zones.process(track.process([_result("cam", f, S.detect(gt, NOISE["heavy"], rng, w, h))]))
        assert r is not None
        gate = r.regions[0]
        exact += gate.in_total.get("person", 0) == want_in and gate.out_total.get("person", 0) == want_out
    out["line_counts_exact"] = f"{exact}/{seeds} runs (heavy noise; expected in {want_in}, out {want_out})"
    return out


def _mean(runs: list[dict[str, float]]) -> dict[str, Any]:
    keys = ("mota", "idf1", "num_switches")
    return {
        **{k: round(float(np.mean([r[k] for r in runs])), 4) for k in keys},
        "idf1_min": round(min(r["idf1"] for r in runs), 4),
        "seeds": len(runs),
    }


# --- the `trackers` package, in its own interpreter --------------------------------------------------
_OTHER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import supervision as sv
    from importlib.metadata import version
    from trackers import ByteTrackTracker

    job = json.load(open(sys.argv[1]))
    out = {"trackers": version("trackers"), "supervision": version("supervision"), "runs": []}
    for run in job["runs"]:
        data = np.load(run["npz"])
        offsets = data["offsets"]
        tracker = ByteTrackTracker(**job["params"])
        ids, boxes, elapsed = [], [], 0.0
        for f in range(len(offsets) - 1):
            lo, hi = offsets[f], offsets[f + 1]
            det = sv.Detections(xyxy=data["boxes"][lo:hi], confidence=data["scores"][lo:hi],
                                class_id=data["classes"][lo:hi])
            t0 = time.thread_time()
            res = tracker.update(det)
            elapsed += time.thread_time() - t0
            keep = res.tracker_id > 0 if len(res) else np.zeros(0, bool)
            ids.append(res.tracker_id[keep].tolist() if len(res) else [])
            boxes.append(res.xyxy[keep].tolist() if len(res) else [])
        out["runs"].append({"name": run["name"], "ms_per_frame": elapsed / (len(offsets) - 1) * 1000,
                            "ids": ids, "boxes": boxes})
    json.dump(out, open(sys.argv[2], "w"))
    """
)
# as close to TrackConfig()'s defaults as its parameters allow (it matches on IoU only, across classes)
_OTHER_PARAMS = {
    "lost_track_buffer": 30,
    "frame_rate": 30.0,
    "track_activation_threshold": 0.6,
    "minimum_consecutive_frames": 2,
    "minimum_iou_threshold": 0.2,
    "high_conf_det_threshold": 0.5,
}


def _npz(path: Path, dets: list[S.Detections]) -> None:
    np.savez(
        path,
        boxes=np.concatenate([d.boxes for d in dets]),
        scores=np.concatenate([d.scores for d in dets]),
        classes=np.concatenate([np.array([CLASSES.get(lb, 1) for lb in d.labels], np.int64) for d in dets]),
        offsets=np.r_[0, np.cumsum([len(d.boxes) for d in dets])],
    )


def compare(python: str, counts: list[int], frames: int, seeds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        runs, truths = [], {}
        for n in counts:
            _npz(d / f"cost{n}.npz", _frames(n, frames, seed=n * 100))
            runs.append({"name": f"cost-{n}", "npz": str(d / f"cost{n}.npz")})
        for name, noise in NOISE.items():
            for seed in range(seeds):
                truth, _, dets = _scene_hyps(noise, seed)
                _npz(d / f"{name}{seed}.npz", dets)
                runs.append({"name": f"{name}-{seed}", "npz": str(d / f"{name}{seed}.npz")})
                truths[f"{name}-{seed}"] = truth
        (d / "job.json").write_text(json.dumps({"params": _OTHER_PARAMS, "runs": runs}))
        (d / "other.py").write_text(_OTHER)
        subprocess.run(
            [python, str(d / "other.py"), str(d / "job.json"), str(d / "out.json")], check=True, timeout=1800
        )
        got = json.loads((d / "out.json").read_text())
    by_name = {r["name"]: r for r in got["runs"]}
    result: dict[str, Any] = {"package": f"trackers {got['trackers']} (supervision {got['supervision']})"}
    result["params"] = _OTHER_PARAMS
    result["cost_ms_per_frame"] = {str(n): round(by_name[f"cost-{n}"]["ms_per_frame"], 4) for n in counts}
    for name in NOISE:
        metrics = []
        for seed in range(seeds):
            r = by_name[f"{name}-{seed}"]
            hyps = [
                (np.array(i, np.int64), np.array(b, np.float64).reshape(-1, 4))
                for i, b in zip(r["ids"], r["boxes"], strict=True)
            ]
            metrics.append(S.mot_metrics(truths[f"{name}-{seed}"], hyps))
        result[name] = _mean(metrics)
    return result


# --- the assignment solver: lap (ours) or scipy ------------------------------------------------------
def solver_cost(counts: list[int], frames: int, rounds: int = 3) -> dict[str, Any]:
    """The ``track`` stage with its solver (lap's ``lapjv``) and with scipy's ``linear_sum_assignment``
    in its place (same thresholded semantics: invalid pairs priced out), interleaved."""
    from scipy.optimize import linear_sum_assignment

    from edgefleet.sdk._analytics import _assign

    lap_solver = _assign.solver
    out: dict[str, Any] = {}
    for n in counts:
        results = [_result("s0", f, d) for f, d in enumerate(_frames(n, frames, seed=n * 100))]
        cpu: dict[str, list[float]] = {"lap": [], "scipy": []}
        for _ in range(rounds):
            for name in ("lap", "scipy"):
                _assign.solver = lap_solver if name == "lap" else (lambda: linear_sum_assignment)  # type: ignore[assignment]
                stage = TrackStage(TrackConfig())
                c0 = time.thread_time()
                for r in results:
                    stage.process([r])
                cpu[name].append((time.thread_time() - c0) / frames * 1000)
        _assign.solver = lap_solver
        out[str(n)] = {k: round(float(np.median(v)), 4) for k, v in cpu.items()}
        print(f"solver lap vs scipy, {n} objects: {out[str(n)]}", file=sys.stderr)
    return out


# --- the real detector across a hot swap --------------------------------------------------------------
def real(after: list[int]) -> dict[str, Any]:
    from tests.support import track_swap

    with tempfile.TemporaryDirectory() as tmp:
        v2 = track_swap.build_v2(Path(tmp) / "nanodet-m-2.0.0")
        same = track_swap.same_model(Path(tmp) / "nanodet-m-1.0.1")
        reference = track_swap.track(None)
        runs = [track_swap.compare(track_swap.track(v2, swap_after=n), reference) for n in after]
        same_run = track_swap.compare(track_swap.track(same, swap_after=after[len(after) // 2]), reference)
    for r in [*runs, same_run]:
        r.pop("analytics", None)
        print(f"real: {r}", file=sys.stderr)
    total = {k: sum(r["at_swap"][k] for r in runs) for k in runs[0]["at_swap"]}
    return {
        "swap_416_to_320": runs,
        "swap_416_to_320_totals": total,
        "swap_to_the_same_model": same_run,
        "without_swap": track_swap.measure(reference, reference, "person") | {"at_swap": None},
    }


# --- the real pipeline, with and without analytics ---------------------------------------------------
def pipeline(streams: int, frames: int, repeats: int) -> dict[str, Any]:
    """The real pipeline, without and with analytics, interleaved ``repeats`` times: fps (wall) and the
    process's CPU time per frame (what the analytics add to a CPU-bound pipeline, even when other work
    shares the cores), and the analytics stage's own time."""
    from edgefleet.sdk import Pipeline

    clip = ROOT / "models" / "media" / "vtest-300.mp4"
    sources = [f"cam{i}={clip}" for i in range(streams)]
    analytics = [
        {"type": "track"},
        {
            "type": "zones",
            "lines": [{"name": "gate", "points": [[384, 150], [384, 400]]}],
            "zones": [{"name": "road", "points": [[0, 190], [768, 190], [768, 330], [0, 300]]}],
        },
    ]
    variants = {"without": ([], True), "with": (analytics, True), "with_inline": (analytics, False)}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    for _ in range(repeats):  # interleaved, so a change in the machine's load hits every variant alike
        for name, (stages, beside) in variants.items():
            p = Pipeline(
                ROOT / "models" / "nanodet-m",
                sources,
                max_batch=streams,
                max_frames=frames,
                analytics=stages,
                analytics_thread=beside,
            )
            c0 = time.process_time()
            stats = p.run()
            cpu = time.process_time() - c0
            stage = stats.stages["analytics"]
            runs[name].append(
                {
                    "fps": round(stats.fps, 2),
                    "cpu_ms_per_frame": round(cpu / stats.results * 1000, 3),
                    "analytics_ms_per_batch_p50": round(stage.p50_ms, 4) if stage.items else 0.0,
                    "mean_batch": round(stats.mean_batch, 2),
                    "detections_per_frame": round(sum(stats.detections_by_label.values()) / stats.results, 1),
                }
            )
            print(f"pipeline {name}: {runs[name][-1]}", file=sys.stderr)
    med = {k: {f: float(np.median([r[f] for r in v])) for f in v[0]} for k, v in runs.items()}
    base = med["without"]
    return {
        "streams": streams,
        "frames_per_stream": frames,
        "runs": runs,
        "median": med,
        "fps_slower_pct": round((1 - med["with"]["fps"] / base["fps"]) * 100, 2),
        "cpu_per_frame_more_pct": round((med["with"]["cpu_ms_per_frame"] / base["cpu_ms_per_frame"] - 1) * 100, 2),
        "inline_fps_slower_pct": round((1 - med["with_inline"]["fps"] / base["fps"]) * 100, 2),
        "inline_cpu_per_frame_more_pct": round(
            (med["with_inline"]["cpu_ms_per_frame"] / base["cpu_ms_per_frame"] - 1) * 100, 2
        ),
        "goal": "<= 5 % slower",
    }


# --- the H200's 64-stream analytics workload, replayed on this CPU ---------------------------------------
GPU_BENCH_ZONES = {  # tools/bench/gpu_bench.py's ANALYTICS["track"] zones stage
    "zones": [{"name": "left", "points": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], "normalized": True}],
    "lines": [{"name": "middle", "points": [[0.5, 0], [0.5, 1]], "normalized": True}],
}
_REPLAY = textwrap.dedent(
    """
    import dataclasses, json, pickle, sys, time
    sys.path[:0] = [sys.argv[1] + "/sdk/src"]
    from edgefleet.sdk._analytics._regions import ZonesConfig, ZonesStage
    from edgefleet.sdk._analytics._track import TrackConfig, TrackStage
    job = json.loads(sys.argv[2])
    clip = pickle.load(open(job["clip"], "rb"))  # (stream-less) results of one stream, in order
    streams = job["streams"]
    batches = [[dataclasses.replace(r, stream_id=f"s{i}") for i in range(streams)] for r in clip]
    track, zones = TrackStage(TrackConfig()), ZonesStage(ZonesConfig.model_validate(job["zones"]))
    c_track = c_zones = 0.0
    events = 0
    for batch in batches:
        c0 = time.thread_time()
        out = track.process(batch)
        c1 = time.thread_time()
        out = zones.process(out)
        c2 = time.thread_time()
        c_track += c1 - c0
        c_zones += c2 - c1
        events += sum(len(r.events) for r in out)
    n = len(batches)
    # what a worker process would add: a batch pickled there and its analysed results pickled back
    import pickle
    mid = batches[len(batches) // 2]
    done = zones.process(track.process(mid))
    c0 = time.thread_time()
    for _ in range(50):
        pickle.loads(pickle.dumps(mid, protocol=5))
        pickle.loads(pickle.dumps(done, protocol=5))
    pickled = (time.thread_time() - c0) / 50 * 1000
    print(json.dumps({"track_ms_per_batch": c_track / n * 1000, "zones_ms_per_batch": c_zones / n * 1000,
                      "pickle_round_trip_ms_per_batch": pickled,
                      "batches": n, "tracks_started": track.tracker.started, "events": events}))
    """
)


def replay(streams: int, baseline: Path | None, rounds: int = 3) -> dict[str, Any]:
    """Track + zones cost per batch of ``streams`` frames of the real detector's output, in this tree's
    code and (optionally) a baseline tree's, rounds interleaved, each in a fresh interpreter."""
    import pickle

    from edgefleet.sdk import Pipeline

    clip = ROOT / "models" / "media" / "vtest-300.mp4"
    with Pipeline(ROOT / "models" / "nanodet-m", [f"cam={clip}"], max_batch=4) as p:
        results = list(p.results())
    trees = {"this": ROOT, **({"baseline": baseline.resolve()} if baseline else {})}
    per: dict[str, list[dict[str, Any]]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "clip.pkl"
        path.write_bytes(pickle.dumps(results))
        job = json.dumps({"clip": str(path), "streams": streams, "zones": GPU_BENCH_ZONES})
        for _ in range(rounds):
            for name, tree in trees.items():
                run = subprocess.run(
                    [sys.executable, "-c", _REPLAY, str(tree), job],
                    check=False,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                if run.returncode:
                    raise RuntimeError(f"replay in {tree} failed: {run.stderr[-2000:]}")
                per[name].append(json.loads(run.stdout))
                print(f"replay {name}: {per[name][-1]}", file=sys.stderr)
    out: dict[str, Any] = {
        "streams_per_batch": streams,
        "frames_per_stream": len(results),
        "detections_per_frame": round(sum(len(r.detections) for r in results) / len(results), 2),
        "zones": GPU_BENCH_ZONES,
    }
    for name, tree in trees.items():
        rows = per[name]
        keys = ("track_ms_per_batch", "zones_ms_per_batch", "pickle_round_trip_ms_per_batch")
        med = {k: round(float(np.median([r[k] for r in rows])), 4) for k in keys}
        med["total_ms_per_batch"] = round(med["track_ms_per_batch"] + med["zones_ms_per_batch"], 4)
        out[name] = {
            "tree": str(tree),
            "median": med,
            "tracks_started": rows[0]["tracks_started"],
            "events": rows[0]["events"],
            "rounds": rows,
        }
    if baseline:
        out["baseline_over_this"] = round(
            out["baseline"]["median"]["total_ms_per_batch"] / out["this"]["median"]["total_ms_per_batch"], 2
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", default="10,50,200")
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--streams", type=int, default=8, help="streams per batch in the cost part")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--pipeline", action="store_true", help="also the real pipeline with and without analytics")
    ap.add_argument("--pipeline-streams", type=int, default=8)
    ap.add_argument("--pipeline-frames", type=int, default=100)
    ap.add_argument("--pipeline-repeats", type=int, default=5)
    ap.add_argument("--replay", type=int, metavar="S", help="also the real detections, S streams per batch")
    ap.add_argument("--baseline-tree", type=Path, help="with --replay: the same in another checkout's code")
    ap.add_argument("--compare-python", help="an interpreter with the `trackers` package installed")
    ap.add_argument("--real", action="store_true", help="also the real detector across hot swaps")
    ap.add_argument("--compare-solver", action="store_true", help="also scipy's solver in place of lap's")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    counts = [int(x) for x in args.objects.split(",")]
    result: dict[str, Any] = {
        "bench": "track",
        "command": " ".join(sys.argv),
        "machine": machine(),
        "load_at_start": load(),
    }
    result["cost_ms_per_frame"] = cost(counts, args.frames, args.streams)
    result["goal"] = "<= 1 ms per frame at 50 objects (track and zones)"
    result["accuracy"] = accuracy(args.seeds)
    if args.compare_python:
        result["compare_trackers_bytetrack"] = compare(args.compare_python, counts, args.frames, args.seeds)
    if args.compare_solver:
        result["solver_lap_vs_scipy_ms_per_frame"] = solver_cost(counts, args.frames)
    if args.real:
        result["real_clip"] = real([100, 130, 160, 190, 220, 250])
    if args.replay:
        result["replay"] = replay(args.replay, args.baseline_tree)
    if args.pipeline:
        result["pipeline"] = pipeline(args.pipeline_streams, args.pipeline_frames, args.pipeline_repeats)
    emit(result, args.out)


if __name__ == "__main__":
    main()
