"""Accuracy: the pipeline's detections on frame 200 of the committed clip match the independent
reference decode (tests/reference/nanodet_reference.py) recorded in golden_nanodet_frame200.json."""

from __future__ import annotations

import json
from pathlib import Path

from edgefleet.sdk import Pipeline

GOLDEN = Path(__file__).resolve().parents[2] / "reference" / "golden_nanodet_frame200.json"


def test_frame_200_matches_reference(nanodet: Path, clip: Path) -> None:
    golden = json.loads(GOLDEN.read_text())
    index = golden["frame_index"]
    with Pipeline(nanodet, [str(clip)], max_frames=index + 1, max_batch=4) as p:
        results = {r.sequence: r for r in p.results()}
    got = results[index]
    want = golden["detections"]
    assert len(got.detections) == len(want)
    for det, ref in zip(got.detections, want, strict=True):
        assert det.class_id == ref["class_id"]
        assert abs(det.score - ref["score"]) < 1e-3
        assert max(abs(a - b) for a, b in zip(det.box, ref["box"], strict=True)) <= 1.0
    assert sum(1 for d in got.detections if d.label == "person") >= 7
