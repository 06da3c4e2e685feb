"""Export the benchmark models (random weights: for throughput, never accuracy) as edgefleet packages.

Runs where torch + torchvision are (the GPU machine):

    python tools/bench/export_models.py OUT_DIR

writes OUT_DIR/{resnet50,yolov8n}-{fp32,fp16}/ (manifest.yaml + model.onnx). ResNet-50 is torchvision's
architecture; the detector is YOLOv8n-shaped (width 0.25, depth 0.33: C2f backbone, SPPF, PAN neck,
decoupled DFL head, output (N, 84, 8400) in the Ultralytics export layout) written here from the
published architecture, with a near-silent class head (weights x 0.01, bias -12) so random weights do not
flood NMS: the detector's post-processing cost is that of an empty scene (NanoDet on the real clip gives
the realistic load). Its BatchNorm statistics are measured on random images first (see
calibrated_detector), and the FP32 and FP16 detectors share weights. FP16 models are exported from the
half-precision module on the GPU.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.onnx_models import write_package


class Conv(nn.Sequential):
    def __init__(self, c1: int, c2: int, k: int = 3, s: int = 1) -> None:
        super().__init__(nn.Conv2d(c1, c2, k, s, k // 2, bias=False), nn.BatchNorm2d(c2), nn.SiLU())


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1, self.cv2, self.add = Conv(c, c), Conv(c, c), shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, c1: int, c2: int, n: int, shortcut: bool) -> None:
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        self.cv1, self.cv2 = Conv(c1, c1 // 2, 1), Conv(c1 * 2, c2, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.pool(x)
        y2 = self.pool(y1)
        return self.cv2(torch.cat([x, y1, y2, self.pool(y2)], 1))


class YoloV8nShaped(nn.Module):
    def __init__(self, nc: int = 80, size: int = 640) -> None:
        super().__init__()
        self.nc, self.reg = nc, 16
        self.b1 = nn.Sequential(
            Conv(3, 16, 3, 2),
            Conv(16, 32, 3, 2),
            C2f(32, 32, 1, True),
            Conv(32, 64, 3, 2),
            C2f(64, 64, 2, True),
        )
        self.b2 = nn.Sequential(Conv(64, 128, 3, 2), C2f(128, 128, 2, True))
        self.b3 = nn.Sequential(Conv(128, 256, 3, 2), C2f(256, 256, 1, True), SPPF(256, 256))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.n1, self.n2 = C2f(384, 128, 1, False), C2f(192, 64, 1, False)
        self.d1, self.n3 = Conv(64, 64, 3, 2), C2f(192, 128, 1, False)
        self.d2, self.n4 = Conv(128, 128, 3, 2), C2f(384, 256, 1, False)
        chans = (64, 128, 256)
        c2, c3 = max(16, chans[0] // 4, 4 * self.reg), max(chans[0], min(nc, 100))
        self.box = nn.ModuleList(
            nn.Sequential(Conv(c, c2), Conv(c2, c2), nn.Conv2d(c2, 4 * self.reg, 1)) for c in chans
        )
        self.cls = nn.ModuleList(nn.Sequential(Conv(c, c3), Conv(c3, c3), nn.Conv2d(c3, nc, 1)) for c in chans)
        for seq in self.cls:  # near-silent class head: random weights must not flood NMS
            with torch.no_grad():
                seq[-1].weight.mul_(0.01)
            nn.init.constant_(seq[-1].bias, -12.0)
        anchors, strides = [], []
        for s in (8, 16, 32):
            g = size // s
            yy, xx = torch.meshgrid(torch.arange(g) + 0.5, torch.arange(g) + 0.5, indexing="ij")
            anchors.append(torch.stack([xx.flatten(), yy.flatten()], 0))
            strides.append(torch.full((1, g * g), float(s)))
        self.register_buffer("anchors", torch.cat(anchors, 1))
        self.register_buffer("strides", torch.cat(strides, 1))
        self.register_buffer("proj", torch.arange(self.reg, dtype=torch.float32).view(1, self.reg, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.b1(x)
        p4 = self.b2(p3)
        p5 = self.b3(p4)
        h4 = self.n1(torch.cat([self.up(p5), p4], 1))
        h3 = self.n2(torch.cat([self.up(h4), p3], 1))
        h4 = self.n3(torch.cat([self.d1(h3), h4], 1))
        h5 = self.n4(torch.cat([self.d2(h4), p5], 1))
        feats = (h3, h4, h5)
        n = x.shape[0]
        box = torch.cat([self.box[i](f).view(n, 4 * self.reg, -1) for i, f in enumerate(feats)], 2)
        cls = torch.cat([self.cls[i](f).view(n, self.nc, -1) for i, f in enumerate(feats)], 2)
        dist = box.view(n, 4, self.reg, -1).transpose(1, 2).softmax(1)
        dist = (dist * self.proj.to(dist.dtype)).sum(1)  # (n, 4, A): l, t, r, b
        lt, rb = dist[:, :2], dist[:, 2:]
        a = self.anchors.to(dist.dtype)
        x1y1, x2y2 = a - lt, a + rb
        xywh = torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * self.strides.to(dist.dtype)
        return torch.cat([xywh, cls.sigmoid()], 1)


def calibrated_detector(nc: int) -> nn.Module:
    """The detector with BatchNorm statistics measured on random images. At initialisation the
    activations grow layer by layer, overflow FP16 and saturate the class head (every anchor a
    "detection"); with measured statistics they stay O(1), so the model behaves numerically like a
    trained one, and the FP32 and FP16 exports share these weights."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = YoloV8nShaped(nc).to(dev)
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.momentum = None  # cumulative average over the calibration batches
            mod.reset_running_stats()
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.rand(8, 3, 640, 640, device=dev))
    return model.eval()


def _export(model: nn.Module, size: int, out: Path, half: bool, in_name: str, out_name: str) -> None:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.eval().to(dev)
    dummy = torch.zeros(1, 3, size, size, device=dev)
    if half:
        model, dummy = model.half(), dummy.half()
    out.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model,
        (dummy,),
        str(out / "model.onnx"),
        input_names=[in_name],
        output_names=[out_name],
        dynamic_axes={in_name: {0: "batch"}, out_name: {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )


def main(root: Path) -> None:
    import torchvision

    torch.manual_seed(0)
    coco = (Path(__file__).resolve().parents[2] / "models/nanodet-m/labels.txt").read_text().split("\n")
    coco = [c for c in coco if c.strip()]
    detector = calibrated_detector(len(coco))
    for prec in ("fp32", "fp16"):
        dtype = "float32" if prec == "fp32" else "float16"
        d = root / f"resnet50-{prec}"
        if not (d / "manifest.yaml").exists():
            _export(torchvision.models.resnet50(weights=None), 224, d, prec == "fp16", "images", "logits")
            write_package(
                d,
                name="resnet50",
                version="1.0.0",
                task="classification",
                input_spec={
                    "name": "images",
                    "shape": [-1, 3, 224, 224],
                    "dtype": dtype,
                    "layout": "NCHW",
                    "color": "RGB",
                    "mean": [123.675, 116.28, 103.53],
                    "std": [58.395, 57.12, 57.375],
                    "resize": "stretch",
                },
                outputs=[{"name": "logits", "shape": [-1, 1000]}],
                decoder={"type": "classification", "top_k": 5, "softmax": True},
                labels=[f"class_{i}" for i in range(1000)],
            )
        d = root / f"yolov8n-{prec}"
        if not (d / "manifest.yaml").exists():
            _export(copy.deepcopy(detector), 640, d, prec == "fp16", "images", "output0")
            write_package(
                d,
                name="yolov8n-shaped",
                version="1.0.0",
                task="detection",
                input_spec={
                    "name": "images",
                    "shape": [-1, 3, 640, 640],
                    "dtype": dtype,
                    "layout": "NCHW",
                    "color": "RGB",
                    "mean": [0, 0, 0],
                    "std": [255, 255, 255],
                    "resize": "letterbox",
                    "pad_value": 114,
                },
                outputs=[{"name": "output0", "shape": [-1, 4 + len(coco), 8400]}],
                decoder={"type": "yolo", "score_threshold": 0.25, "iou_threshold": 0.45},
                labels=coco,
            )
        print(f"exported {prec} models under {root}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/edgefleet-bench-models"))
