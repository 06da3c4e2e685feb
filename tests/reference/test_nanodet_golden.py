"""The committed NanoDet-m package, clip and golden JSON agree with the reference decode.

Skipped where onnxruntime or OpenCV is not installed.  Needs no edgefleet import.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def test_packages_verify():
    out = subprocess.run(
        [sys.executable, str(REPO / "tools" / "models" / "_package.py"), "verify", str(REPO / "models" / "nanodet-m")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_reference_matches_golden():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("cv2")
    spec = importlib.util.spec_from_file_location("nanodet_reference", HERE / "nanodet_reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)

    golden = json.loads((HERE / "golden_nanodet_frame200.json").read_text())
    assert golden["model_sha256"] == ref.sha256(ref.MODEL_DIR / "model.onnx")
    assert golden["clip_sha256"] == ref.sha256(ref.CLIP)
    frame = ref.read_frame(ref.CLIP, golden["frame_index"])
    assert list(frame.shape) == golden["frame_shape"]
    dets = ref.detect(frame)
    tol = golden["suggested_tolerance"]
    expected = golden["detections"]
    assert len(dets) == len(expected)
    for got, want in zip(dets, expected):
        assert got[5] == want["class_id"]
        assert abs(got[4] - want["score"]) <= tol["score"]
        assert max(abs(a - b) for a, b in zip(got[:4], want["box"])) <= tol["box_px"]
    persons = sum(1 for d in dets if d[5] == 0)
    assert 7 <= persons <= 11
