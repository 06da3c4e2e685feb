"""Export Ultralytics YOLOv8n detect/segment/pose/classify models, built from their architecture YAMLs
with random weights, to ONNX exactly as ``yolo export format=onnx`` does (run by build_ultralytics.sh in
its venv: torch 2.13.0 CPU + ultralytics).

    python _ultralytics_export.py CLIP OUT_DIR NAME...

Before the export, each model's BatchNorm statistics are measured on 16 letterboxed frames of CLIP (the
weights stay random): with untouched statistics a randomly initialised network gives the same few scores
at every anchor, which would test nothing; measured, its scores and boxes differ from anchor to anchor
and follow the input (still no accuracy: these are not trained detectors).

NAME is one of yolov8n, yolov8n-seg, yolov8n-pose, yolov8n-cls (imgsz 224, as classifiers are trained),
yolov8n-dynamic (detect, imgsz 320, dynamic=True) and yolov8n-seg-dynamic, yolov8n-pose-dynamic (640,
dynamic=True: batches for the decode benchmark). Each export is opened again and its interface
printed; the metadata Ultralytics writes (names, imgsz, stride, task, batch, kpt_shape) must be there.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np
import onnx
import torch
from ultralytics import YOLO

EXPORTS = {
    "yolov8n": ("yolov8n.yaml", {}),
    "yolov8n-seg": ("yolov8n-seg.yaml", {}),
    "yolov8n-pose": ("yolov8n-pose.yaml", {}),
    "yolov8n-cls": ("yolov8n-cls.yaml", {"imgsz": 224}),
    "yolov8n-dynamic": ("yolov8n.yaml", {"imgsz": 320, "dynamic": True}),
    "yolov8n-seg-dynamic": ("yolov8n-seg.yaml", {"dynamic": True}),
    "yolov8n-pose-dynamic": ("yolov8n-pose.yaml", {"dynamic": True}),
}
REQUIRED_METADATA = ("names", "imgsz", "stride", "task", "batch")


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value or d.dim_param for d in value_info.type.tensor_type.shape.dim]


def _frames(clip: Path, size: int, count: int = 16) -> torch.Tensor:
    """``count`` frames of ``clip``, letterboxed to ``size`` x ``size`` with grey (114) borders, RGB / 255."""
    cap = cv2.VideoCapture(str(clip))
    out = []
    while len(out) < count:
        ok, img = cap.read()
        if not ok:
            raise SystemExit(f"{clip}: fewer than {count} frames")
        h, w = img.shape[:2]
        r = min(size / h, size / w)
        nh, nw = round(h * r), round(w * r)
        canvas = np.full((size, size, 3), 114, np.uint8)
        top, left = (size - nh) // 2, (size - nw) // 2
        canvas[top : top + nh, left : left + nw] = cv2.resize(img, (nw, nh))[:, :, ::-1]
        out.append(torch.from_numpy(canvas.copy()).permute(2, 0, 1).float() / 255)
    cap.release()
    return torch.stack(out)


def _measure_batchnorm(model: YOLO, frames: torch.Tensor) -> None:
    """Replace every BatchNorm layer's running statistics by those of ``frames`` (a cumulative average)."""
    net = model.model
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    net.train()
    with torch.no_grad():
        for i in range(0, len(frames), 4):
            net(frames[i : i + 4])
    net.eval()


def main(clip: Path, out: Path, names: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        yaml_name, options = EXPORTS[name]
        torch.manual_seed(0)
        target = out.resolve() / f"{name}.onnx"
        here = Path.cwd()
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)  # the export lands in the working folder
            try:
                model = YOLO(yaml_name)
                _measure_batchnorm(model, _frames(clip, int(options.get("imgsz", 640))))
                exported = Path(model.export(format="onnx", **options)).resolve()
                shutil.move(str(exported), target)
            finally:
                os.chdir(here)
        proto = onnx.load(str(target))
        meta = {p.key: p.value for p in proto.metadata_props}
        missing = [k for k in REQUIRED_METADATA if k not in meta]
        if missing:
            raise SystemExit(f"{target}: Ultralytics metadata {missing} missing")
        ins = [(i.name, _dims(i)) for i in proto.graph.input]
        outs = [(o.name, _dims(o)) for o in proto.graph.output]
        print(f"{name}: task {meta['task']}, imgsz {meta['imgsz']}, inputs {ins}, outputs {outs}", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
