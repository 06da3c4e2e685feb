#!/usr/bin/env python3
"""Independent, deliberately plain reference decode of the NanoDet-m model package.

Only numpy, OpenCV and onnxruntime; nothing from edgefleet.  Everything is spelled out here on
purpose (constants included) so the SDK's decoder can be checked against it.

Pipeline for one BGR frame (H x W x 3, uint8):

1. Preprocessing: LETTERBOX with pad value 0 (chosen; see below).
   scale = min(416 / W, 416 / H); resize to (round(W*scale), round(H*scale)) with
   cv2.INTER_LINEAR; paste centred (offset = (416 - size) // 2) on a 416x416 canvas filled
   with the raw pixel value 0 (black, before normalisation, as NanoDet's own warpAffine
   border); then (x - [103.53, 116.28, 123.675]) / [57.375, 57.12, 58.395] per BGR channel
   (NanoDet's values, no RGB swap, no /255); HWC -> NCHW float32.
   For the 768x576 clip: 416x312 image, 52 rows of padding above and below.

   Why letterbox, pad 0 (run `--compare`; frames 0, 50, ..., 250, 299 of the clip, score
   threshold 0.35, IoU 0.6):
     letterbox pad 0  : frame 200 -> person x8, car x2, truck, dog, sports ball, skis;
                        57 persons over the 7 frames, 10 detections of classes that are not
                        in the scene (only people, a van and a parked car are);
     letterbox pad 114: practically the same (56 persons, 11 implausible);
     stretch (416x416): frame 200 -> person x11 (two duplicates on the far-right pair and
                        two traffic cones among them), bird x2, bus, dog, sports ball,
                        truck, car; 52 persons over the 7 frames, 20 implausible detections.
   On frame 200 letterbox finds all 7 people that are really there (plus one traffic cone
   at 0.41), with fewer duplicates and half the wrong-class detections of stretch, and it
   keeps the aspect ratio.  (MODELS.md's "person x10" matches the stretch count, which
   includes duplicates and cones.)
2. Run models/nanodet-m/model.onnx (input "image"; outputs cls_8, reg_8, cls_16, reg_16,
   cls_32, reg_32: cls = [1, N, 80] sigmoid class scores, reg = [1, N, 44] GFL box
   distributions, 4 sides x 11 bins, N = (416/stride)^2, cells in row-major order).
3. Decode per stride s in (8, 16, 32), as NanoDet's GFL head does: cell n = row * W_s + col
   has its centre at ((col + 0.5) * s, (row + 0.5) * s) in 416x416 input pixels; for each of
   the 4 sides (left, top, right, bottom) take a softmax over its 11 bins and the expectation
   sum_k k * p_k (0..10), times s = distance of that side from the cell centre.
   Box = (cx - l, cy - t, cx + r, cy + b).
4. Every (cell, class) pair with score > 0.35 is a candidate (NanoDet's multiclass NMS);
   class-aware NMS (greedy, IoU > 0.6 suppresses, per class); keep the 100 best.
5. Map boxes back to source pixels (undo the resize/padding), clip to the frame.

Returns a list of (x1, y1, x2, y2, score, class_id), best score first.

Command line (run from the repository root):
    python tests/reference/nanodet_reference.py                 # print frame 200 detections
    python tests/reference/nanodet_reference.py --write-golden  # rewrite the golden JSON
    python tests/reference/nanodet_reference.py --compare       # letterbox vs stretch, pad values
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "models" / "nanodet-m"
CLIP = REPO / "models" / "media" / "vtest-300.mp4"
GOLDEN = Path(__file__).resolve().parent / "golden_nanodet_frame200.json"

INPUT_SIZE = 416
MEAN_BGR = np.array([103.53, 116.28, 123.675], np.float32)
STD_BGR = np.array([57.375, 57.12, 58.395], np.float32)
STRIDES = (8, 16, 32)
REG_MAX = 10  # 11 bins: 0..10
NUM_CLASSES = 80
SCORE_THRESHOLD = 0.35
IOU_THRESHOLD = 0.6
MAX_DETECTIONS = 100
RESIZE = "letterbox"  # the chosen preprocessing (see the docstring)
PAD_VALUE = 0  # raw pixel value of the letterbox padding (before normalisation)


# ---------------------------------------------------------------- preprocessing
def preprocess(frame_bgr: np.ndarray, resize: str = RESIZE, pad_value: float = PAD_VALUE):
    """Returns (tensor [1,3,416,416] float32, (scale_x, scale_y, pad_x, pad_y)).

    input-pixel x = source x * scale_x + pad_x (same for y)."""
    h, w = frame_bgr.shape[:2]
    if resize == "letterbox":
        scale = min(INPUT_SIZE / w, INPUT_SIZE / h)
        nw, nh = int(round(w * scale)), int(round(h * scale))
        resized = cv2.resize(frame_bgr, (nw, nh), interpolation=cv2.INTER_LINEAR)
        canvas = np.full((INPUT_SIZE, INPUT_SIZE, 3), pad_value, np.float32)
        pad_x, pad_y = (INPUT_SIZE - nw) // 2, (INPUT_SIZE - nh) // 2
        canvas[pad_y : pad_y + nh, pad_x : pad_x + nw] = resized
        transform = (nw / w, nh / h, float(pad_x), float(pad_y))
    elif resize == "stretch":
        canvas = cv2.resize(frame_bgr, (INPUT_SIZE, INPUT_SIZE), interpolation=cv2.INTER_LINEAR)
        canvas = canvas.astype(np.float32)
        transform = (INPUT_SIZE / w, INPUT_SIZE / h, 0.0, 0.0)
    else:
        raise ValueError(resize)
    x = (canvas.astype(np.float32) - MEAN_BGR) / STD_BGR  # per BGR channel
    x = np.ascontiguousarray(x.transpose(2, 0, 1)[None])  # HWC -> NCHW
    return x.astype(np.float32), transform


# ---------------------------------------------------------------- decode
def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def decode_level(cls: np.ndarray, reg: np.ndarray, stride: int):
    """cls [N,80], reg [N,44] -> boxes [N,4] in input pixels, scores [N,80]."""
    side = INPUT_SIZE // stride
    assert cls.shape == (side * side, NUM_CLASSES) and reg.shape == (side * side, 4 * (REG_MAX + 1))
    rows, cols = np.divmod(np.arange(side * side), side)  # row-major cells
    cx = (cols + 0.5) * stride
    cy = (rows + 0.5) * stride
    prob = softmax(reg.reshape(-1, 4, REG_MAX + 1), axis=2)
    dist = (prob * np.arange(REG_MAX + 1, dtype=np.float32)).sum(axis=2) * stride  # [N,4] l,t,r,b
    boxes = np.stack([cx - dist[:, 0], cy - dist[:, 1], cx + dist[:, 2], cy + dist[:, 3]], axis=1)
    return boxes, cls


def iou_one_to_many(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    ix1 = np.maximum(box[0], boxes[:, 0])
    iy1 = np.maximum(box[1], boxes[:, 1])
    ix2 = np.minimum(box[2], boxes[:, 2])
    iy2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(ix2 - ix1, 0, None) * np.clip(iy2 - iy1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def nms_per_class(boxes, scores, class_ids, iou_threshold):
    """Greedy NMS within each class; returns kept indices, best score first."""
    keep = []
    for c in np.unique(class_ids):
        idx = np.where(class_ids == c)[0]
        idx = idx[np.argsort(-scores[idx], kind="stable")]
        while idx.size:
            best = idx[0]
            keep.append(best)
            if idx.size == 1:
                break
            ious = iou_one_to_many(boxes[best], boxes[idx[1:]])
            idx = idx[1:][ious <= iou_threshold]
    keep = np.array(keep, dtype=np.int64)
    return keep[np.argsort(-scores[keep], kind="stable")]


def postprocess(
    outputs: dict,
    transform,
    frame_shape,
    score_threshold=SCORE_THRESHOLD,
    iou_threshold=IOU_THRESHOLD,
    max_detections=MAX_DETECTIONS,
):
    all_boxes, all_scores, all_classes = [], [], []
    for s in STRIDES:
        boxes, cls = decode_level(outputs[f"cls_{s}"][0], outputs[f"reg_{s}"][0], s)
        cell, klass = np.nonzero(cls > score_threshold)
        all_boxes.append(boxes[cell])
        all_scores.append(cls[cell, klass])
        all_classes.append(klass)
    boxes = np.concatenate(all_boxes).astype(np.float64)
    scores = np.concatenate(all_scores).astype(np.float64)
    classes = np.concatenate(all_classes)
    if scores.size == 0:
        return []
    keep = nms_per_class(boxes, scores, classes, iou_threshold)[:max_detections]
    sx, sy, px, py = transform
    h, w = frame_shape[:2]
    dets = []
    for i in keep:
        x1, y1, x2, y2 = boxes[i]
        x1, x2 = np.clip([(x1 - px) / sx, (x2 - px) / sx], 0, w)
        y1, y2 = np.clip([(y1 - py) / sy, (y2 - py) / sy], 0, h)
        dets.append((float(x1), float(y1), float(x2), float(y2), float(scores[i]), int(classes[i])))
    return dets


# ---------------------------------------------------------------- model + frames
_SESSIONS: dict = {}


def session(model_dir: Path = MODEL_DIR) -> ort.InferenceSession:
    key = str(model_dir)
    if key not in _SESSIONS:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        _SESSIONS[key] = ort.InferenceSession(
            str(Path(model_dir) / "model.onnx"), so, providers=["CPUExecutionProvider"]
        )
    return _SESSIONS[key]


def labels(model_dir: Path = MODEL_DIR) -> list[str]:
    return (Path(model_dir) / "labels.txt").read_text().splitlines()


def detect(
    frame_bgr: np.ndarray, model_dir: Path = MODEL_DIR, resize: str = RESIZE, pad_value: float = PAD_VALUE, **thresholds
):
    """The reference: one BGR frame -> [(x1, y1, x2, y2, score, class_id), ...]."""
    x, transform = preprocess(frame_bgr, resize, pad_value)
    sess = session(model_dir)
    names = [o.name for o in sess.get_outputs()]
    outputs = dict(zip(names, sess.run(None, {"image": x})))
    return postprocess(outputs, transform, frame_bgr.shape, **thresholds)


def read_frame(clip: Path = CLIP, index: int = 200) -> np.ndarray:
    """Decode the clip with OpenCV, reading frames sequentially up to `index` (0-based)."""
    cap = cv2.VideoCapture(str(clip))
    if not cap.isOpened():
        raise RuntimeError(f"cannot open {clip}")
    try:
        for i in range(index + 1):
            ok, frame = cap.read()
            if not ok:
                raise RuntimeError(f"{clip} ended at frame {i}")
        return frame
    finally:
        cap.release()


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---------------------------------------------------------------- CLI
def summary(dets, names):
    counts: dict[str, int] = {}
    for d in dets:
        counts[names[d[5]]] = counts.get(names[d[5]], 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def golden_dict(frame, dets, names, index):
    return {
        "description": "NanoDet-m reference detections (tests/reference/nanodet_reference.py) "
        "on one frame of the committed clip",
        "model": "models/nanodet-m/model.onnx",
        "model_sha256": sha256(MODEL_DIR / "model.onnx"),
        "clip": "models/media/vtest-300.mp4",
        "clip_sha256": sha256(CLIP),
        "frame_index": index,
        "frame_read": "cv2.VideoCapture, frames read sequentially from 0",
        "frame_shape": list(frame.shape),
        "frame_mean_bgr": [round(float(v), 3) for v in frame.reshape(-1, 3).mean(axis=0)],
        "preprocessing": {
            "resize": RESIZE,
            "pad_value": PAD_VALUE,
            "input_size": [INPUT_SIZE, INPUT_SIZE],
            "interpolation": "cv2.INTER_LINEAR",
            "color": "BGR",
            "mean": [103.53, 116.28, 123.675],
            "std": [57.375, 57.12, 58.395],
            "layout": "NCHW",
        },
        "decoder": {
            "strides": list(STRIDES),
            "reg_max": REG_MAX,
            "score_threshold": SCORE_THRESHOLD,
            "iou_threshold": IOU_THRESHOLD,
            "max_detections": MAX_DETECTIONS,
            "nms": "class-aware greedy, every (cell, class) with score > threshold is a candidate",
        },
        "suggested_tolerance": {"box_px": 2.0, "score": 0.01},
        "summary": summary(dets, names),
        "detections": [
            {"box": [round(v, 2) for v in d[:4]], "score": round(d[4], 5), "class_id": d[5], "label": names[d[5]]}
            for d in dets
        ],
    }


def to_json(d: dict) -> str:
    """JSON with one top-level key per line and one detection per line (easy to diff)."""
    lines = []
    for k, v in d.items():
        if k == "detections":
            items = [f"    {json.dumps(x)}" for x in v]
            lines.append(f'  "{k}": [\n' + ",\n".join(items) + "\n  ]")
        else:
            lines.append(f"  {json.dumps(k)}: {json.dumps(v)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frame", type=int, default=200)
    ap.add_argument("--write-golden", action="store_true")
    ap.add_argument("--compare", action="store_true", help="compare letterbox/stretch and pad values")
    ap.add_argument("--draw", metavar="PNG", help="draw the detections to a PNG")
    args = ap.parse_args(argv)
    names = labels()
    frame = read_frame(CLIP, args.frame)
    if args.compare:
        variants = [("letterbox", 0), ("letterbox", 114), ("stretch", 0)]
        frames = [0, 50, 100, 150, 200, 250, 299]
        cache = {i: read_frame(CLIP, i) for i in frames}
        for resize, pad in variants:
            tot_person, tot_score, implausible = 0, 0.0, 0
            per = []
            for i in frames:
                d = detect(cache[i], resize=resize, pad_value=pad)
                p = [x for x in d if x[5] == 0]
                tot_person += len(p)
                tot_score += sum(x[4] for x in p)
                per.append(len(p))
                # the scene holds people, a van and a parked car: any other class is wrong
                implausible += sum(1 for x in d if names[x[5]] not in ("person", "car", "truck"))
            d200 = detect(frame, resize=resize, pad_value=pad)
            print(
                f"{resize:9s} pad {pad:3d}: frame {args.frame}: {summary(d200, names)}; "
                f"persons per frame {frames}: {per} (total {tot_person}, "
                f"mean person score {tot_score / max(tot_person, 1):.3f}); "
                f"implausible-class detections {implausible}"
            )
        return 0
    dets = detect(frame)
    print(f"frame {args.frame}: {len(dets)} detections: {summary(dets, names)}")
    for d in dets:
        print(f"  {names[d[5]]:12s} {d[4]:.3f}  [{d[0]:.1f}, {d[1]:.1f}, {d[2]:.1f}, {d[3]:.1f}]")
    if args.draw:
        img = frame.copy()
        for x1, y1, x2, y2, s, c in dets:
            cv2.rectangle(img, (int(x1), int(y1)), (int(x2), int(y2)), (0, 255, 0), 2)
            cv2.putText(
                img,
                f"{names[c]} {s:.2f}",
                (int(x1), max(int(y1) - 4, 10)),
                cv2.FONT_HERSHEY_SIMPLEX,
                0.45,
                (0, 255, 255),
                1,
            )
        cv2.imwrite(args.draw, img)
    if args.write_golden:
        if args.frame != 200:
            print("--write-golden is for frame 200", file=sys.stderr)
            return 2
        GOLDEN.write_text(to_json(golden_dict(frame, dets, names, args.frame)))
        print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
