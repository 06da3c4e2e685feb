"""Host decoding cost per batch of a GFL head (NanoDet) on real model outputs (prints one JSON document).

    python tools/bench/decode_bench.py [--model models/nanodet-m] [--clip models/media/vtest-300.mp4]
        [--batch 32] [--repeats 50] [--out FILE]

Runs the model once on the CPU over the clip's first ``--batch`` frames, then times the package's
decoder on its outputs three ways: on the dense tensors (what a CPU or TensorRT backend hands over), on
the box records the GPU decodes, and on the detections the GPU's NMS leaves (:class:`BoxCandidates`,
built by the kernels' host references in ``tests/support/gfl_reference.py``). No GPU needed: this is the
post-processing thread's own work, the part of a GPU pipeline's post stage that is not waiting for the
GIL. All three give the same detections (checked).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _harness import emit, load, machine

from tests.support.gfl_reference import gfl_nms_reference, gfl_records


def main(argv: list[str]) -> None:
    import cv2

    from edgefleet.sdk import load_package
    from edgefleet.sdk._model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=Path("models/nanodet-m"))
    ap.add_argument("--clip", type=Path, default=Path("models/media/vtest-300.mp4"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    model = load_model(load_package(args.model), device="cpu", max_batch=args.batch, warmup=False)
    gfl = [f for f in model.decoder.candidate_filters() if f.layout == "gfl"]
    if not gfl:
        raise SystemExit(f"error: {args.model} has no GFL head (its decoder declares no gfl filter)")
    cap = cv2.VideoCapture(str(args.clip))
    frames = []
    for _ in range(args.batch):
        ok, img = cap.read()
        if not ok:
            raise SystemExit(f"error: {args.clip} has fewer than {args.batch} frames")
        frames.append(img)
    buf = model.acquire_buffer(1.0)
    assert buf is not None
    transforms = [model.preprocess(f, buf, i) for i, f in enumerate(frames)]
    model.preprocess.finish(buf, len(frames))
    dense: dict[str, Any] = dict(model.backend.infer(buf, len(frames)))
    dec = model.decoder
    boxes: dict[str, Any] = {**dense, **gfl_records(dense, gfl)}
    final: dict[str, Any] = {**boxes, **{f.output: gfl_nms_reference(boxes[f.output], f) for f in gfl}}

    def best_ms(outputs: dict[str, Any]) -> float:
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            dec.decode(outputs, transforms)
            best = min(best, time.perf_counter() - t0)
        return round(best * 1e3, 3)

    labels = [[(d.class_id, round(d.score, 5)) for d in r.detections] for r in dec.decode(dense, transforms)]
    for other in (boxes, final):
        got = [[(d.class_id, round(d.score, 5)) for d in r.detections] for r in dec.decode(other, transforms)]
        if got != labels:
            raise SystemExit("error: the GPU forms decode to other detections than the dense tensors")
    doc = {
        "command": "python tools/bench/decode_bench.py " + " ".join(argv),
        "machine": machine(),
        "load_at_start": load(),
        "numpy": np.__version__,
        "model": args.model.name,
        "batch": len(frames),
        "box_records": int(boxes[gfl[0].output].frame.size),
        "detections": sum(len(r) for r in labels),
        "timing": f"best of {args.repeats}",
        "dense_ms_per_batch": best_ms(dense),
        "gpu_boxes_ms_per_batch": best_ms(boxes),
        "gpu_nms_ms_per_batch": best_ms(final),
    }
    emit(doc, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
