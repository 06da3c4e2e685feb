"""Decode cost of the Ultralytics segment and pose decoders per frame, at batches of 32 (prints one JSON
document).

    python tools/bench/yolo_decode_bench.py [--exports .cache/models/ultralytics] [--clip models/media/vtest-300.mp4]
        [--batch 32] [--repeats 10] [--device cpu|cuda:N] [--out FILE]

Packages ``yolov8n-seg-dynamic`` and ``yolov8n-pose-dynamic`` (tools/models/build_ultralytics.sh) with
``edgefleet models init``, runs each once over the clip's first ``--batch`` frames and times the
package's decoder on those outputs (the post-processing thread's own work; the inference is not in the
figure). The exports have random weights, whose scores are far below Ultralytics' 0.25, so each decoder
is timed at thresholds that leave a realistic few and a crowd of detections per frame (the counts are in
the JSON). Their masks are speckled (``outlines_per_mask``: a trained model's mask has one to a few), so
the polygon figures are a worst case for the outlining. On ``cuda:N`` the outputs are what the GPU path
hands the decoder: the candidates filtered on the device (only anchors above the threshold, with their
mask coefficients or keypoints) and, for segmentation, the prototypes whole.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import ROOT, emit, load, machine

# (export, decoder parameters, thresholds): a few and many detections per frame on the clip
CASES = [
    ("yolov8n-seg-dynamic", {"mask_format": "polygon"}, (0.004, 0.001)),
    ("yolov8n-seg-dynamic", {"mask_format": "rle"}, (0.004, 0.001)),
    ("yolov8n-pose-dynamic", {}, (0.03, 0.01)),
]


def _frames(clip: Path, n: int) -> list[np.ndarray]:
    import cv2

    cap = cv2.VideoCapture(str(clip))
    frames = []
    while len(frames) < n:
        ok, img = cap.read()
        if not ok:
            raise SystemExit(f"error: {clip} has fewer than {n} frames")
        frames.append(img)
    return frames


def _case(pkg: Any, params: dict[str, Any], threshold: float, frames: list[np.ndarray], args: Any) -> dict[str, Any]:
    from edgefleet.sdk._model import load_model

    model = load_model(pkg, device=args.device, max_batch=len(frames), overrides={"score_threshold": threshold})
    try:
        if params:
            model.decoder.p = model.decoder.p.model_copy(update=params)  # type: ignore[attr-defined]
        buf = model.acquire_buffer(1.0)
        assert buf is not None
        transforms = [model.preprocess(f, buf, i) for i, f in enumerate(frames)]
        model.preprocess.finish(buf, len(frames))
        t0 = time.perf_counter()
        outputs = dict(model.backend.infer(buf, len(frames)))
        infer_ms = (time.perf_counter() - t0) * 1e3
        decoded = model.decoder.decode(outputs, transforms)
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            model.decoder.decode(outputs, transforms)
            best = min(best, time.perf_counter() - t0)
        forms = sorted({type(v).__name__ for v in outputs.values()})
    finally:
        model.close()
    n = len(frames)
    dets = sum(len(d.detections) for d in decoded)
    outlines = [len(x.mask.polygons) for d in decoded for x in d.detections if x.mask is not None and x.mask.polygons]
    return {
        "package": pkg.name,
        "params": params,
        "score_threshold": threshold,
        "detections_per_frame": round(dets / n, 1),
        "decode_ms_per_batch": round(best * 1e3, 2),
        "decode_ms_per_frame": round(best * 1e3 / n, 3),
        "infer_ms_per_batch_one_run": round(infer_ms, 1),
        "outputs_as": forms,
        "outlines_per_mask": round(float(np.mean(outlines)), 1) if outlines else None,
    }


def _solid_mask(frame: np.ndarray, repeats: int) -> dict[str, Any]:
    """The outlining and run-length coding of one mask shaped like a trained model's (a solid ellipse
    of 300 x 220 input pixels, one outline), mapped to the clip's frames: what a real mask costs beside the
    speckled ones of the random weights."""
    import cv2

    from edgefleet.sdk._decoders._masks import mask_polygons, mask_rle
    from edgefleet.sdk._preprocess import Transform

    h, w = frame.shape[:2]
    r = min(640 / w, 640 / h)
    t = Transform(
        round(w * r) / w, round(h * r) / h, (640 - round(w * r)) // 2, (640 - round(h * r)) // 2, w, h, 640, 640
    )
    mask = np.zeros((220, 300), np.uint8)
    cv2.ellipse(mask, (150, 110), (145, 105), 0, 0, 360, 1, -1)
    solid = mask.astype(bool)
    out: dict[str, Any] = {"size": [300, 220]}
    for name, fn in (("polygon", mask_polygons), ("rle", mask_rle)):
        fn(100, 200, solid, t)
        best = float("inf")
        for _ in range(max(20, repeats)):
            t0 = time.perf_counter()
            fn(100, 200, solid, t)
            best = min(best, time.perf_counter() - t0)
        out[name] = round(best * 1e3, 3)
    return out


def main(argv: list[str]) -> None:
    from edgefleet.sdk import load_package
    from edgefleet.sdk._packaging import init_package

    ap = argparse.ArgumentParser()
    ap.add_argument("--exports", type=Path, default=ROOT / ".cache/models/ultralytics")
    ap.add_argument("--clip", type=Path, default=ROOT / "models/media/vtest-300.mp4")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    frames = _frames(args.clip, args.batch)
    start = load()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for export, params, thresholds in CASES:
            model_file = args.exports / f"{export}.onnx"
            if not model_file.exists():
                raise SystemExit(f"error: {model_file} missing: tools/models/build.sh ultralytics")
            root = Path(tmp) / export
            if not root.exists():
                init_package(model_file, root)
            pkg = load_package(root)
            for t in thresholds:
                results.append(_case(pkg, params, t, frames, args))
    doc = {
        "command": "python tools/bench/yolo_decode_bench.py " + " ".join(argv),
        "one_solid_mask_ms": _solid_mask(frames[0], args.repeats),
        "machine": machine(),
        "load_at_start": start,
        "numpy": np.__version__,
        "device": args.device,
        "batch": args.batch,
        "timing": f"best of {args.repeats} decodes of the same outputs",
        "results": results,
    }
    emit(doc, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
