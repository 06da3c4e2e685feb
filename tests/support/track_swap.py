"""Tracks across a real hot swap: NanoDet-m 1.0.0 (416 px, 80 classes) → 2.0.0 (320 px, 6 classes) on the
committed clip, with the ``track`` stage in the pipeline. Used by tests/integration/test_tracking_real.py
and tools/bench/track_bench.py (``--real``).

What is measured, for one label:
* ``tracked_before`` / ``same_id_within_10_frames``: tracks on the last frame before the cut-over, and how
  many of them are on a frame of the new version within 10 frames, with the same id;
* ``new_id_on_an_object_tracked_before``: objects tracked on the last frame before the cut-over that the
  first frame after it shows (IoU >= 0.5) under an id that did not exist before (a restarted track);
* ``id_switches_vs_reference``: the same clip tracked without a swap is the reference (up to the cut-over
  both runs are the same); over the frames from 10 before the cut-over to 20 after it both runs' tracked
  objects are matched (IoU >= 0.5) and motmetrics counts how often an object of the reference changes the
  id it has in the swap run. A swap to a model that detects differently can change identities where the
  new model itself would (two people crossing): a swap to the same model must give 0.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgefleet.sdk import Pipeline, Result, SwapReport
from tests.support.scenes import _iou_matrix

REPO = Path(__file__).resolve().parents[2]
CLIP = REPO / "models" / "media" / "vtest-300.mp4"
V1 = REPO / "models" / "nanodet-m"
# the track stage as the demo runs it: NanoDet-m scores pedestrians low, so the thresholds sit lower
TRACK = {"type": "track", "high_threshold": 0.4, "new_track_threshold": 0.5, "low_threshold": 0.2}
SCORE_THRESHOLD = 0.2


def same_model(out: Path, version: str = "1.0.1") -> Path:
    """1.0.0 under another version number: a swap that changes nothing the tracker sees."""
    shutil.copytree(V1, out)
    manifest = out / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("version: 1.0.0", f"version: {version}", 1))
    return out


def build_v2(out: Path) -> Path:
    script = REPO / "tools" / "models" / "build_nanodet_320.py"
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True, timeout=300)
    return out


@dataclass
class SwapTracks:
    results: dict[str, list[Result]] = field(default_factory=lambda: defaultdict(list))
    report: SwapReport | None = None
    analytics: dict[str, dict[str, float | int]] = field(default_factory=dict)


def track(v2: Path | None, streams: int = 1, swap_after: int = 150) -> SwapTracks:
    """The clip through the pipeline with the track stage (``streams`` copies); hot-swap to ``v2`` once
    ``swap_after`` results of the first stream are out (no swap when None)."""
    out = SwapTracks()
    sources = [f"cam{i}={CLIP}" for i in range(streams)]
    with Pipeline(V1, sources, max_batch=streams, score_threshold=SCORE_THRESHOLD, analytics=[TRACK]) as p:
        swapper: threading.Thread | None = None
        for r in p.results(timeout=120):
            out.results[r.stream_id].append(r)
            if v2 is not None and swapper is None and r.stream_id == "cam0" and r.sequence >= swap_after:

                def swap() -> None:
                    out.report = p.swap_model(v2, health_window_s=0.0)

                swapper = threading.Thread(target=swap)
                swapper.start()
        if swapper is not None:
            swapper.join(60)
        out.analytics = p.stats().analytics
    return out


def run(v2: Path, *, streams: int = 1, swap_after: int = 150, label: str = "person") -> dict[str, Any]:
    """Track the clip (``streams`` copies) without a swap, then again hot-swapping to ``v2`` once
    ``swap_after`` results of the first stream are out, and compare the tracks of ``label``."""
    return compare(track(v2, streams, swap_after), track(None, streams, swap_after), label)


def compare(swapped: SwapTracks, reference: SwapTracks, label: str = "person") -> dict[str, Any]:
    return measure(swapped, reference, label) | {
        "analytics": swapped.analytics,
        "swap_ok": swapped.report.ok if swapped.report else None,
    }


def _tracked(r: Result, label: str) -> tuple[list[int], np.ndarray]:
    dets = [d for d in r.detections if d.label == label and d.track_id is not None]
    return [int(d.track_id) for d in dets if d.track_id is not None], np.array([d.box for d in dets]).reshape(-1, 4)


def _switches(a: list[Result], b: list[Result], frames: range, label: str) -> int:
    import motmetrics as mm

    acc = mm.MOTAccumulator(auto_id=True)
    for k in frames:
        gid, gb = _tracked(a[k], label)
        hid, hb = _tracked(b[k], label)
        iou = _iou_matrix(gb, hb)
        acc.update(gid, hid, np.where(iou >= 0.5, 1.0 - iou, np.nan))
    return int(mm.metrics.create().compute(acc, metrics=["num_switches"], name="x")["num_switches"].iloc[0])


def measure(swapped: SwapTracks, reference: SwapTracks, label: str) -> dict[str, Any]:
    lengths: Counter[tuple[str, int]] = Counter()
    versions: Counter[str] = Counter()
    cuts: list[int] = []
    switches = seen_before = seen_again = class_gone = restarted = 0
    for sid, rs in swapped.results.items():
        for r in rs:
            versions[r.model_version] += 1
            for d in r.detections:
                if d.label == label and d.track_id is not None:
                    lengths[(sid, d.track_id)] += 1
        cut = next((i for i, r in enumerate(rs) if r.model_version != rs[0].model_version), None)
        if cut is None:
            continue
        class_gone += sum(e.reason == "class_gone" for e in rs[cut].ended_tracks)
        ever = {i for r in rs[:cut] for i in _tracked(r, label)[0]}
        before_ids, before_boxes = _tracked(rs[cut - 1], label)
        before = set(before_ids)
        after = {i for r in rs[cut : cut + 10] for i in _tracked(r, label)[0]}
        seen_before += len(before)
        seen_again += len(before & after)
        now_ids, now_boxes = _tracked(rs[cut], label)
        iou = _iou_matrix(before_boxes, now_boxes)
        for j in range(len(before_ids)):
            k = int(iou[j].argmax()) if iou.shape[1] else -1
            if k >= 0 and iou[j, k] >= 0.5 and now_ids[k] not in before and now_ids[k] not in ever:
                restarted += 1  # the object seen before the cut-over is under an id born after it
        window = range(max(0, cut - 10), min(len(rs), cut + 20))
        switches += _switches(reference.results[sid], rs, window, label)
        cuts.append(rs[cut].sequence)
    n = len(lengths)
    return {
        "label": label,
        "tracks": n,
        "mean_track_length_frames": round(sum(lengths.values()) / n, 1) if n else 0.0,
        "results_by_version": dict(versions),
        "cut_over_at_frame": cuts,
        "at_swap": {
            "id_switches_vs_reference": switches,
            "tracked_before": seen_before,
            "same_id_within_10_frames": seen_again,
            "new_id_on_an_object_tracked_before": restarted,
            "class_gone": class_gone,
        },
    }


__all__ = ["CLIP", "TRACK", "V1", "build_v2", "compare", "measure", "run", "same_model", "track"]
