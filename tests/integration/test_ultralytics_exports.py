"""Plain Ultralytics exports (detect, segment, pose, classify), made on this machine's CPU by
tools/models/build_ultralytics.sh (YOLOv8n architectures, random weights, BatchNorm statistics of the
clip), packaged by ``edgefleet models init`` with no edits and decoded by our decoders.

Each decoder's output is compared with an independent numpy decode of the same raw outputs, written here
from Ultralytics' documentation of its post-processing (``ultralytics.utils.nms.non_max_suppression``:
candidates above ``conf``, the ``max_nms`` = 30000 most confident, class-aware greedy NMS at ``iou``, the
first ``max_det``; ``ops.process_mask``: prototypes x coefficients, bilinear upsampling to the input,
> 0, cropped to the box; ``ops.scale_boxes`` / ``scale_coords``: minus the letterbox padding, divided by
the gain, clipped) and not from our decoder. Random weights give tiny scores, so the thresholds here are
low enough to yield hundreds of boxes per frame.

The first run builds the exports into .cache/ (about 1 minute: a venv with the torch 2.13.0 CPU wheel
and ultralytics, then five exports); later runs reuse them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgefleet.sdk import Pipeline, load_package
from edgefleet.sdk._model import LoadedModel, load_model

REPO = Path(__file__).resolve().parents[2]
EXPORTS = REPO / ".cache" / "models" / "ultralytics"
EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))
pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def exports() -> Path:
    if not (EXPORTS / "BUILD").exists():
        env = dict(os.environ, PYTHON=sys.executable)
        out = subprocess.run(
            ["bash", str(REPO / "tools/models/build.sh"), "ultralytics"],
            capture_output=True,
            text=True,
            env=env,
            timeout=1200,
            check=False,
        )
        assert out.returncode == 0, f"build failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return EXPORTS


@pytest.fixture(scope="module")
def packages(exports: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``edgefleet models init`` on each export, exactly as a user runs it."""
    root = tmp_path_factory.mktemp("packages")
    out = {}
    for name in ("yolov8n", "yolov8n-seg", "yolov8n-pose", "yolov8n-cls", "yolov8n-dynamic"):
        res = subprocess.run(
            [EDGEFLEET, "models", "init", str(exports / f"{name}.onnx"), "--out", str(root / name)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        assert "loaded and run once in ONNX Runtime" in res.stdout, res.stdout
        out[name] = root / name
    return out


def _frames(clip: Path, n: int) -> list[np.ndarray]:
    import cv2

    cap = cv2.VideoCapture(str(clip))
    frames = []
    for i in range(n * 20):
        ok, img = cap.read()
        assert ok
        if i % 20 == 0:
            frames.append(img)
    return frames


def _raw(model: LoadedModel, frames: list[np.ndarray]) -> tuple[dict[str, np.ndarray], list[Any]]:
    """Run the batch-1 export frame by frame through the package's own preprocessing; the outputs stacked
    into one batch (what a batched model would give) and the frames' transforms."""
    outs: list[dict[str, np.ndarray]] = []
    transforms = []
    for img in frames:
        buf = model.acquire_buffer(1.0)
        assert buf is not None
        transforms.append(model.preprocess(img, buf, 0))
        outs.append({k: np.array(v) for k, v in model.backend.infer(buf, 1).items()})
        model.release_buffer(buf)
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}, transforms


def _decode(
    pkg: Path, frames: list[np.ndarray], conf: float | None = None, **params: Any
) -> tuple[list[Any], dict[str, np.ndarray]]:
    """The package's decoder (``params`` changed) on the raw outputs of ``frames``; (decoded, raw)."""
    model = load_model(load_package(pkg), warmup=False, overrides={} if conf is None else {"score_threshold": conf})
    try:
        if params:
            model.decoder.p = model.decoder.p.model_copy(update=params)  # type: ignore[attr-defined]
        raw, transforms = _raw(model, frames)
        return model.decoder.decode(raw, transforms), raw
    finally:
        model.close()


# --- the independent reference, from Ultralytics' documentation -----------------------------------------
def _nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[int]:
    """Greedy NMS (torchvision.ops.nms semantics): best first, drop every box whose IoU with it is > iou."""
    order = list(np.argsort(-scores, kind="stable"))
    keep = []
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    while order:
        i = order.pop(0)
        keep.append(i)
        rest = np.array(order, dtype=np.int64)
        if rest.size == 0:
            break
        xx1 = np.maximum(boxes[i, 0], boxes[rest, 0])
        yy1 = np.maximum(boxes[i, 1], boxes[rest, 1])
        xx2 = np.minimum(boxes[i, 2], boxes[rest, 2])
        yy2 = np.minimum(boxes[i, 3], boxes[rest, 3])
        inter = np.clip(xx2 - xx1, 0, None) * np.clip(yy2 - yy1, 0, None)
        ov = inter / (area[i] + area[rest] - inter)
        order = [int(j) for j, o in zip(rest, ov, strict=True) if o <= iou]
    return keep


def _ultralytics_nms(pred: np.ndarray, nc: int, conf: float, iou: float, max_det: int = 300) -> np.ndarray:
    """One frame's (4 + nc + extra, A) prediction -> (k, 6 + extra) rows x1, y1, x2, y2, conf, cls, extra."""
    x = pred.T.astype(np.float32)
    x = x[x[:, 4 : 4 + nc].max(1) > conf]
    box = np.stack([x[:, 0] - x[:, 2] / 2, x[:, 1] - x[:, 3] / 2, x[:, 0] + x[:, 2] / 2, x[:, 1] + x[:, 3] / 2], 1)
    cls = x[:, 4 : 4 + nc]
    j = cls.argmax(1)
    c = cls.max(1)
    x = np.concatenate([box, c[:, None], j[:, None].astype(np.float32), x[:, 4 + nc :]], 1)
    if x.shape[0] > 30000:
        x = x[np.argsort(-x[:, 4], kind="stable")[:30000]]
    # class-aware: boxes offset by class never overlap (in float64: float32 coordinates of 600000 and
    # more would round the IoUs, which per-class NMS, what the offsets stand for, does not)
    offset = x[:, 5:6].astype(np.float64) * 7680
    keep = _nms(x[:, :4].astype(np.float64) + offset, x[:, 4], iou)[:max_det]
    return x[keep]


def _letterbox(src_hw: tuple[int, int], dst_hw: tuple[int, int]) -> tuple[float, float, float, float]:
    """Ultralytics' LetterBox / scale_boxes: (gain_x, gain_y, pad_x, pad_y)."""
    gain = min(dst_hw[0] / src_hw[0], dst_hw[1] / src_hw[1])
    new_h, new_w = round(src_hw[0] * gain), round(src_hw[1] * gain)
    return (
        new_w / src_hw[1],
        new_h / src_hw[0],
        round((dst_hw[1] - new_w) / 2 - 0.1),
        round((dst_hw[0] - new_h) / 2 - 0.1),
    )


def _scale_points(xy: np.ndarray, src_hw: tuple[int, int], dst_hw: tuple[int, int]) -> np.ndarray:
    gx, gy, px, py = _letterbox(src_hw, dst_hw)
    out = xy.astype(np.float64).copy()
    out[..., 0] = np.clip((out[..., 0] - px) / gx, 0, src_hw[1])
    out[..., 1] = np.clip((out[..., 1] - py) / gy, 0, src_hw[0])
    return out


def _reference_masks(protos: np.ndarray, coeffs: np.ndarray, boxes: np.ndarray, dst_hw: tuple[int, int]) -> np.ndarray:
    """ops.process_mask(upsample=True): (k, H, W) bool at the input's size."""
    import cv2

    c, mh, mw = protos.shape
    m = (coeffs @ protos.reshape(c, -1)).reshape(-1, mh, mw)
    up = np.stack([cv2.resize(x, (dst_hw[1], dst_hw[0]), interpolation=cv2.INTER_LINEAR) for x in m])
    r = np.arange(dst_hw[1])[None, None, :]
    q = np.arange(dst_hw[0])[None, :, None]
    x1, y1, x2, y2 = (boxes[:, i][:, None, None] for i in range(4))
    return (up > 0) & (r >= x1) & (r < x2) & (q >= y1) & (q < y2)


def _decode_rle(counts: tuple[int, ...], size: tuple[int, int]) -> np.ndarray:
    flat = np.zeros(size[0] * size[1], bool)
    pos, value = 0, False
    for n in counts:
        flat[pos : pos + n] = value
        pos, value = pos + n, not value
    assert pos == flat.size
    return flat.reshape(size[1], size[0]).T


def _check_boxes(ours: list[Any], ref: np.ndarray, src_hw: tuple[int, int], dst_hw: tuple[int, int]) -> None:
    assert len(ours) == len(ref)
    gx, gy, px, py = _letterbox(src_hw, dst_hw)
    want = ref[:, :4].astype(np.float64).copy()
    want[:, 0::2] = np.clip((want[:, 0::2] - px) / gx, 0, src_hw[1])
    want[:, 1::2] = np.clip((want[:, 1::2] - py) / gy, 0, src_hw[0])
    np.testing.assert_allclose([d.box for d in ours], want, atol=2e-3)
    np.testing.assert_allclose([d.score for d in ours], ref[:, 4], rtol=1e-6)
    assert [d.class_id for d in ours] == ref[:, 5].astype(int).tolist()


# --- the tests -------------------------------------------------------------------------------------------
def test_models_init_recognises_each_export_with_no_edits(packages: dict[str, Path]) -> None:
    want = {
        "yolov8n": ("detection", "yolo", [1, 84, 8400]),
        "yolov8n-seg": ("segmentation", "yolo-seg", [1, 116, 8400]),
        "yolov8n-pose": ("pose", "yolo-pose", [1, 56, 8400]),
        "yolov8n-cls": ("classification", "classification", [1, 1000]),
        "yolov8n-dynamic": ("detection", "yolo", [-1, 84, 2100]),  # resolved on a dry run
    }
    for name, (task, decoder, shape) in want.items():
        m = load_package(packages[name]).manifest
        assert (m.task, m.decoder.type, list(m.outputs[0].shape)) == (task, decoder, shape), name
        assert (m.input.color, m.input.std, m.input.layout) == ("RGB", (255, 255, 255), "NCHW")
    assert load_package(packages["yolov8n-cls"]).manifest.input.resize == "center_crop"
    assert load_package(packages["yolov8n-pose"]).manifest.decoder.params()["kpt_shape"] == [17, 3]
    assert len(load_package(packages["yolov8n"]).labels) == 80


@pytest.mark.parametrize("conf", [0.0003, 0.00005])
def test_detect_equals_the_reference_decode(packages: dict[str, Path], clip: Path, conf: float) -> None:
    frames = _frames(clip, 3)
    got, raw = _decode(packages["yolov8n"], frames, conf)
    total = 0
    for i, img in enumerate(frames):
        ref = _ultralytics_nms(raw["output0"][i], 80, conf, 0.7)
        _check_boxes(list(got[i].detections), ref, img.shape[:2], (640, 640))
        total += len(ref)
    assert total > 100  # low enough for NMS to have real work


def test_the_pre_nms_cap_is_ultralytics_30000_not_1000(packages: dict[str, Path], clip: Path) -> None:
    """The finding: with 1000 candidates kept before NMS, a low threshold lost detections Ultralytics
    keeps (max_det raised so that NMS, not the limit, decides how many are left)."""
    frames = _frames(clip, 2)
    conf, max_det = 0.00002, 5000
    counts = {}
    for cap in (1000, 30_000):
        got, raw = _decode(packages["yolov8n"], frames, conf, pre_nms_top_k=cap, max_detections=max_det)
        counts[cap] = [len(d.detections) for d in got]
    ref = [len(_ultralytics_nms(raw["output0"][i], 80, conf, 0.7, max_det)) for i in range(len(frames))]
    assert (raw["output0"][:, 4:].max(1) > conf).sum(1).min() > 1000  # more candidates than the old cap
    assert counts[30_000] == ref
    assert all(old < new for old, new in zip(counts[1000], ref, strict=True)), (counts, ref)


def test_segment_equals_the_reference_decode(packages: dict[str, Path], clip: Path, tmp_path: Path) -> None:
    conf = 0.0003
    frames = _frames(clip, 2)
    results = {}
    for fmt in ("rle", "polygon"):
        results[fmt], raw = _decode(packages["yolov8n-seg"], frames, conf, mask_format=fmt)
    import cv2

    checked, ious = 0, []
    for i, img in enumerate(frames):
        ref = _ultralytics_nms(raw["output0"][i], 80, conf, 0.7)
        masks = _reference_masks(raw["output1"][i], ref[:, 6:], ref[:, :4], (640, 640))
        has = masks.any((1, 2))  # the predictor drops detections whose mask is empty
        ref, masks = ref[has], masks[has]
        ours = list(results["rle"][i].detections)
        _check_boxes(ours, ref, img.shape[:2], (640, 640))
        gx, gy, px, py = _letterbox(img.shape[:2], (640, 640))
        h, w = img.shape[:2]
        for det, poly_det, mask in zip(ours, results["polygon"][i].detections, masks, strict=True):
            assert det.mask is not None and det.mask.counts is not None and det.mask.size == (h, w)
            # the reference mask at the frame's size: the letterbox cut off, each pixel from its centre
            inner = mask[py : py + round(h * gy), px : px + round(w * gx)]
            want = cv2.resize(inner.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST_EXACT).astype(bool)
            got = _decode_rle(det.mask.counts, det.mask.size)
            assert (got != want).sum() <= max(2, 0.01 * want.sum()), (got.sum(), want.sum())
            assert poly_det.mask is not None and poly_det.mask.polygons
            drawn = np.zeros((h, w), np.uint8)
            for poly in poly_det.mask.polygons:
                cv2.fillPoly(drawn, [np.round(np.array(poly).reshape(-1, 2)).astype(np.int32)], 1)
            inter, union = (drawn.astype(bool) & want).sum(), (drawn.astype(bool) | want).sum()
            ious.append((int(want.sum()), inter / union))
            checked += 1
    assert checked > 20
    # Polygons are the outer outlines (as Ultralytics' masks.xy): they run through the boundary pixels'
    # centres and fill holes, so they approximate the mask (the RLE above is the exact form); random
    # weights make ragged masks, the hard case for outlines.
    large = [iou for area, iou in ious if area >= 500]
    assert len(large) > 20 and min(large) > 0.5 and float(np.mean(large)) > 0.8


def test_pose_equals_the_reference_decode(packages: dict[str, Path], clip: Path) -> None:
    conf = 0.003
    frames = _frames(clip, 3)
    got, raw = _decode(packages["yolov8n-pose"], frames, conf)
    total = 0
    for i, img in enumerate(frames):
        ref = _ultralytics_nms(raw["output0"][i], 1, conf, 0.7)
        ours = list(got[i].detections)
        _check_boxes(ours, ref, img.shape[:2], (640, 640))
        kpts = ref[:, 6:].reshape(-1, 17, 3)
        want = _scale_points(kpts[..., :2], img.shape[:2], (640, 640))
        np.testing.assert_allclose([[(k.x, k.y) for k in d.keypoints] for d in ours], want, atol=2e-3)
        np.testing.assert_allclose([[k.score for k in d.keypoints] for d in ours], kpts[..., 2], rtol=1e-6)
        total += len(ref)
    assert total > 50


def test_classify_equals_the_reference_decode(packages: dict[str, Path], clip: Path) -> None:
    frames = _frames(clip, 3)
    got, raw = _decode(packages["yolov8n-cls"], frames)
    for i in range(len(frames)):
        probs = raw["output0"][i]  # Ultralytics' Classify head exports probabilities (softmax applied)
        assert abs(float(probs.sum()) - 1) < 1e-4
        top5 = np.argsort(-probs, kind="stable")[:5]
        assert [c.class_id for c in got[i].classifications] == top5.tolist()
        np.testing.assert_allclose([c.score for c in got[i].classifications], probs[top5], rtol=1e-6)


def test_each_export_runs_through_the_pipeline_and_the_annotated_video(
    packages: dict[str, Path], clip: Path, tmp_path: Path
) -> None:
    """`edgefleet run` on each package as written by `models init`, a JSONL and an annotated video out."""
    for name, score in (("yolov8n-seg", "0.0005"), ("yolov8n-pose", "0.005"), ("yolov8n-cls", None)):
        out = tmp_path / f"{name}.jsonl"
        cmd = [EDGEFLEET, "run", "-m", str(packages[name]), "-s", str(clip), "--max-frames", "4", "-q"]
        cmd += ["--jsonl", str(out), "--out", str(tmp_path / f"{name}.mp4")]
        if score:
            cmd += ["--score", score]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stderr
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(lines) == 4 and all(x["source"] == str(clip) for x in lines)
        if name == "yolov8n-seg":
            assert any("mask" in d for x in lines for d in x.get("detections", []))
        if name == "yolov8n-pose":
            assert any(len(d.get("keypoints", [])) == 17 for x in lines for d in x.get("detections", []))
        if name == "yolov8n-cls":
            assert all(len(x["classifications"]) == 5 for x in lines)
        assert (tmp_path / f"{name}.mp4").stat().st_size > 10_000


def test_the_dynamic_export_with_a_wrong_anchor_count_is_refused(packages: dict[str, Path], tmp_path: Path) -> None:
    """The finding: a manifest declaring [-1, 84, 8400] for an export whose output is (1, 84, 2100)."""
    import shutil

    import yaml

    pkg = tmp_path / "dyn"
    shutil.copytree(packages["yolov8n-dynamic"], pkg)
    path = pkg / "manifest.yaml"
    data = yaml.safe_load(path.read_text())
    data["outputs"][0]["shape"] = [-1, 84, 8400]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    res = subprocess.run([EDGEFLEET, "models", "inspect", str(pkg)], capture_output=True, text=True, check=False)
    assert res.returncode != 0
    assert "output0 has shape [-1, 84, 8400], the model's is [-1, 84, 2100] when it runs" in res.stderr


def test_pipeline_results_from_a_seg_package(packages: dict[str, Path], clip: Path) -> None:
    with Pipeline(packages["yolov8n-seg"], [str(clip)], max_frames=2, score_threshold=0.0005) as p:
        results = list(p.results())
    assert len(results) == 2
    dets = [d for r in results for d in r.detections]
    assert dets and all(d.mask is not None and d.mask.polygons for d in dets)


def test_an_ultralytics_head_keeps_its_post_processing_in_float_when_quantized(
    packages: dict[str, Path], clip: Path, tmp_path: Path
) -> None:
    """output0 concatenates boxes (0..640 pixels) with scores (0..1): quantized as one INT8 tensor its
    scale is 2.5 per level and every score is 0 (the INT8 model found nothing before). The tail after the
    last convolution stays in float. Random weights make the scores too close together for the figures
    to mean anything, so the minimums are off here: the INT8 version must find detections at all."""
    import shutil

    import yaml

    pkg = tmp_path / "yolov8n"
    shutil.copytree(packages["yolov8n"], pkg)
    data = yaml.safe_load((pkg / "manifest.yaml").read_text())
    data["decoder"]["score_threshold"] = 0.002
    (pkg / "manifest.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "int8"
    args = ["--frames", "40", "--held-out", "20", "--out", str(out), "--min-recall", "0", "--min-precision", "0"]
    res = subprocess.run(
        [EDGEFLEET, "models", "quantize", str(pkg), "--calibrate", str(clip), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    q = load_package(out).manifest.quantization
    assert q is not None and q.precision is not None  # the INT8 version finds detections
    assert any(n.endswith("Concat after the last weighted layer") for n in q.left_in_float)
    assert any("Sigmoid after the last weighted layer" in n for n in q.left_in_float)
