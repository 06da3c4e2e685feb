"""The YOLO decoders' defaults and the pieces of the segmentation decoder, on hand-made tensors (the
equivalence with Ultralytics on real exports is tests/integration/test_ultralytics_exports.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgefleet.sdk import DecodeContext, load_package
from edgefleet.sdk._decoders._detection import YoloDecoder, YoloParams
from edgefleet.sdk._preprocess import Transform


def test_yolo_defaults_are_ultralytics_predict_defaults() -> None:
    """Ultralytics' predict mode (docs.ultralytics.com/modes/predict, "Inference arguments"): conf 0.25,
    iou 0.7, max_det 300, agnostic_nms False; non_max_suppression keeps at most max_nms = 30000 boxes."""
    p = YoloParams()
    assert (p.score_threshold, p.iou_threshold, p.max_detections, p.pre_nms_top_k, p.agnostic) == (
        0.25,
        0.7,
        300,
        30_000,
        False,
    )


def _crowd(n_dupes: int, n_distinct: int) -> np.ndarray:
    """(1, 4 + 3, A): ``n_dupes`` copies of one box scored 0.9 .. 0.8, then ``n_distinct`` separate small
    boxes scored below all of them (class 0)."""
    a = n_dupes + n_distinct
    out = np.zeros((1, 7, a), np.float32)
    out[0, :4, :n_dupes] = np.array([[50], [50], [20], [20]])
    out[0, 4, :n_dupes] = np.linspace(0.9, 0.8, n_dupes)
    xs = (np.arange(n_distinct) % 100) * 10 + 5
    ys = (np.arange(n_distinct) // 100) * 10 + 205
    out[0, 0, n_dupes:], out[0, 1, n_dupes:] = xs, ys
    out[0, 2:4, n_dupes:] = 4
    out[0, 4, n_dupes:] = np.linspace(0.7, 0.3, n_distinct)
    return out


def _yolo(toy_models: dict[str, Path], **params: object) -> YoloDecoder:
    pkg = load_package(toy_models["yolo"])
    return YoloDecoder(YoloParams(**params), DecodeContext(dict(params), pkg.manifest, ("a", "b", "c"), ("output0",)))


def test_every_candidate_up_to_30000_reaches_nms(toy_models: dict[str, Path]) -> None:
    """The finding: 1000 candidates before NMS. Here the 1200 best are one box repeated; Ultralytics
    keeps it once plus the 500 distinct boxes below them, up to max_det."""
    out = _crowd(1200, 500)
    t = Transform(1.0, 1.0, 0, 0, 1000, 1000, 1000, 1000)
    (got,) = _yolo(toy_models, max_detections=1000).decode({"output0": out}, [t])
    assert len(got.detections) == 501
    (default,) = _yolo(toy_models).decode({"output0": out}, [t])
    assert len(default.detections) == 300  # Ultralytics' max_det


def test_agnostic_nms_suppresses_across_classes(toy_models: dict[str, Path]) -> None:
    out = np.zeros((1, 7, 2), np.float32)
    out[0, :4] = [[50, 51], [50, 50], [20, 20], [20, 20]]
    out[0, 4, 0], out[0, 5, 1] = 0.9, 0.8  # the same place, classes a and b
    t = Transform(1.0, 1.0, 0, 0, 100, 100, 100, 100)
    assert len(_yolo(toy_models).decode({"output0": out}, [t])[0].detections) == 2
    assert len(_yolo(toy_models, agnostic=True).decode({"output0": out}, [t])[0].detections) == 1


def _decode_rle(m: Any) -> np.ndarray:
    assert m.counts is not None and m.size is not None
    h, w = m.size
    flat = np.repeat(np.arange(len(m.counts)) % 2 == 1, m.counts)
    assert flat.size == h * w
    return flat.reshape(w, h).T


@pytest.mark.parametrize("seed", range(20))
def test_rle_is_the_mask_at_source_resolution_column_major(seed: int) -> None:
    from edgefleet.sdk._decoders._masks import mask_rle

    rng = np.random.default_rng(seed)
    src_w, src_h = int(rng.integers(20, 90)), int(rng.integers(20, 90))
    r = min(64 / src_w, 64 / src_h)
    nw, nh = round(src_w * r), round(src_h * r)
    t = Transform(nw / src_w, nh / src_h, (64 - nw) // 2, (64 - nh) // 2, src_w, src_h, 64, 64)
    x0, y0 = int(rng.integers(0, 40)), int(rng.integers(0, 40))
    mask = rng.random((int(rng.integers(1, 24)), int(rng.integers(1, 24)))) > 0.4
    got = _decode_rle(mask_rle(x0, y0, mask, t))
    # reference: every source pixel takes the input pixel its centre falls in
    full = np.zeros((64, 64), bool)
    full[y0 : y0 + mask.shape[0], x0 : x0 + mask.shape[1]] = mask[: 64 - y0, : 64 - x0]
    ys = np.floor((np.arange(src_h) + 0.5) * t.scale_y + t.pad_y).astype(int)
    xs = np.floor((np.arange(src_w) + 0.5) * t.scale_x + t.pad_x).astype(int)
    want = full[np.clip(ys, 0, 63)][:, np.clip(xs, 0, 63)]
    np.testing.assert_array_equal(got, want)


def test_box_masks_are_cropped_to_the_box_pixels_and_follow_the_coefficients() -> None:
    from edgefleet.sdk._decoders._masks import box_masks

    protos = np.zeros((2, 4, 4), np.float32)
    protos[0] = 1.0  # everywhere positive
    protos[1, :, :2] = -1.0  # left half negative
    masks = box_masks(protos, np.array([[1.0, 0.0], [0.0, 1.0]], np.float32), np.array([[2.5, 2, 9, 6]] * 2), (16, 16))
    (x0, y0, m0), (_, _, m1) = masks
    assert (x0, y0, m0.shape) == (3, 2, (4, 6))  # columns 3..8 (x1 <= c < x2), rows 2..5
    assert m0.all()
    assert not m1.any()  # coefficient on the second prototype only: negative on the left, 0 on the right


def test_detection_dict_carries_mask_and_keypoints() -> None:
    from edgefleet.sdk import Detection, Keypoint, Mask

    d = Detection(
        (1, 2, 3, 4),
        0.5,
        0,
        "person",
        mask=Mask(polygons=((1.0, 2.0, 3.0, 4.0, 5.0, 6.0),)),
        keypoints=(Keypoint(1, 2, 0.9),),
    )
    assert d.to_dict()["mask"] == {"polygons": [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]}
    assert d.to_dict()["keypoints"] == [[1.0, 2.0, 0.9]]
    rle = Mask(counts=(3, 2, 1), size=(2, 3))
    assert Detection((0, 0, 1, 1), 1.0, 0, "x", mask=rle).to_dict()["mask"] == {
        "rle": {"size": [2, 3], "counts": [3, 2, 1]}
    }
    assert rle.area == 2


@pytest.mark.parametrize("seed", range(10))
def test_the_fast_upsampling_takes_the_taps_of_the_whole_image_upsampling(seed: int) -> None:
    """OpenCV resizing the prototypes under a box (one pixel around it) gives what F.interpolate over the
    whole image gives there: the taps gathered one by one, and cv2.resize of everything."""
    import cv2

    from edgefleet.sdk._decoders._masks import _gathered, _upsample

    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(40, 40)).astype(np.float32)
    whole = cv2.resize(logits, (160, 160), interpolation=cv2.INTER_LINEAR)
    c0, r0 = int(rng.integers(0, 150)), int(rng.integers(0, 150))
    c1, r1 = int(rng.integers(c0 + 1, 161)), int(rng.integers(r0 + 1, 161))
    fast = _upsample(logits, c0, c1, r0, r1, (160, 160))
    np.testing.assert_allclose(fast, _gathered(logits, c0, c1, r0, r1, (160, 160)), atol=1e-5)
    np.testing.assert_allclose(fast, whole[r0:r1, c0:c1], atol=1e-5)


def test_segmentation_masks_of_a_known_head_in_source_pixels(tmp_path: Path) -> None:
    from edgefleet.sdk import Pipeline
    from tests.support.onnx_models import yolo_seg_package

    pkg = yolo_seg_package(tmp_path / "seg")
    with Pipeline(pkg, ["synthetic:?frames=1&width=64&height=64&live=false"]) as p:
        (r,) = list(p.results())
    a, b = r.detections
    assert (a.label, b.label) == ("a", "b")
    ma, mb = _decode_rle(a.mask), _decode_rle(b.mask)
    want = np.zeros((64, 64), bool)
    want[12:52, 8:32] = True  # the box's left half (the first prototype is negative right of x = 32)
    np.testing.assert_array_equal(ma, want)
    want = np.zeros((64, 64), bool)
    want[24:40, 36:52] = True
    np.testing.assert_array_equal(mb, want)


def test_segmentation_masks_follow_the_letterbox(tmp_path: Path) -> None:
    """A 128x64 frame is letterboxed to 64x32 (+16 rows of padding at the top): the mask maps back x2."""
    from edgefleet.sdk import Pipeline
    from tests.support.onnx_models import yolo_seg_package

    pkg = yolo_seg_package(tmp_path / "seg")
    with Pipeline(pkg, ["synthetic:?frames=1&width=128&height=64&live=false"]) as p:
        (r,) = list(p.results())
    ma = _decode_rle(r.detections[0].mask)
    assert ma.shape == (64, 128)
    ys, xs = np.nonzero(ma)
    # input rows 16..47 are the frame (rows 12..51 of the box clip to them), columns 8..31
    assert (xs.min(), xs.max(), ys.min(), ys.max()) == (16, 63, 0, 63)


def test_pose_keypoints_of_a_known_head_in_source_pixels(tmp_path: Path) -> None:
    from edgefleet.sdk import Pipeline
    from tests.support.onnx_models import yolo_pose_package

    pkg = yolo_pose_package(tmp_path / "pose")
    with Pipeline(pkg, ["synthetic:?frames=1&width=128&height=128&live=false"]) as p:
        (r,) = list(p.results())
    a, b = r.detections  # letterbox x2: source = input * 2
    assert [(k.x, k.y) for k in a.keypoints] == [(2 * (10 + 2 * k), 2 * (5 + k)) for k in range(17)]
    np.testing.assert_allclose([k.score for k in a.keypoints], [k / 16 for k in range(17)], rtol=1e-6)
    assert all((k.x, k.y) == (120, 120) for k in b.keypoints)
