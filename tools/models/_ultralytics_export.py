"""Export Ultralytics YOLOv8n detect/segment/pose/classify models, built from their architecture YAMLs
with random weights, to ONNX exactly as ``yolo export format=onnx`` does (run by build_ultralytics.sh in
its venv: torch 2.13.0 CPU + ultralytics).

    python _ultralytics_export.py OUT_DIR NAME...

NAME is one of yolov8n, yolov8n-seg, yolov8n-pose, yolov8n-cls (imgsz 224, as classifiers are trained)
and yolov8n-dynamic (detect, imgsz 320, dynamic=True). Each export is opened again and its interface
printed; the metadata Ultralytics writes (names, imgsz, stride, task, batch, kpt_shape) must be there.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import onnx
import torch
from ultralytics import YOLO

EXPORTS = {
    "yolov8n": ("yolov8n.yaml", {}),
    "yolov8n-seg": ("yolov8n-seg.yaml", {}),
    "yolov8n-pose": ("yolov8n-pose.yaml", {}),
    "yolov8n-cls": ("yolov8n-cls.yaml", {"imgsz": 224}),
    "yolov8n-dynamic": ("yolov8n.yaml", {"imgsz": 320, "dynamic": True}),
}
REQUIRED_METADATA = ("names", "imgsz", "stride", "task", "batch")


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value or d.dim_param for d in value_info.type.tensor_type.shape.dim]


def main(out: Path, names: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        yaml_name, options = EXPORTS[name]
        torch.manual_seed(0)
        target = out.resolve() / f"{name}.onnx"
        here = Path.cwd()
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)  # the export lands in the working folder
            try:
                exported = Path(YOLO(yaml_name).export(format="onnx", **options)).resolve()
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
    main(Path(sys.argv[1]), sys.argv[2:])
