"""Host decoding cost per batch on real model outputs (prints one JSON document).

    python tools/bench/decode_bench.py [--model models/nanodet-m] [--clip models/media/vtest-300.mp4]
        [--batch 32] [--repeats 50] [--out FILE]

Runs the model once on the CPU over the clip's first ``--batch`` frames, then times the package's
decoder on those outputs: on the dense tensors (what a CPU backend hands over), on thresholded rows
(:class:`CandidateRows`, built here on the host exactly as the kernels build them, in float16 when
``--fp16``) and, for a GFL head (NanoDet), on the box records the GPU decodes and on the detections its
NMS leaves (:class:`BoxCandidates`, built by the kernels' host reference in
``tests/support/gfl_reference.py``). No GPU needed: this is the post-processing
thread's own work, the part of a GPU pipeline's post stage that is not waiting for the GIL.
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


def _rows(dense: np.ndarray, threshold: float, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """(N, A, C) -> the anchors with any score >= threshold, in anchor order, and their indices."""
    kept = [np.nonzero(f.max(axis=1) >= threshold)[0] for f in dense]
    m = max([1, *(len(k) for k in kept)])
    index = np.full((dense.shape[0], m), -1, np.int32)
    data = np.zeros((dense.shape[0], m, dense.shape[2]), dtype)
    for i, k in enumerate(kept):
        index[i, : len(k)] = k
        data[i, : len(k)] = dense[i][k]
    return data, index


def main(argv: list[str]) -> None:
    import cv2

    from edgefleet.sdk import load_package
    from edgefleet.sdk._model import load_model
    from edgefleet.sdk._sparse import CandidateRows

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=Path("models/nanodet-m"))
    ap.add_argument("--clip", type=Path, default=Path("models/media/vtest-300.mp4"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--fp16", action="store_true", help="candidates in float16 (an FP16 model's outputs)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    model = load_model(load_package(args.model), device="cpu", max_batch=args.batch, warmup=False)
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
    dense = model.backend.infer(buf, len(frames))
    dec = model.decoder
    sparse: dict[str, Any] = dict(dense)
    dtype = np.float16 if args.fp16 else np.float32
    filters = dec.candidate_filters() if hasattr(dec, "candidate_filters") else []
    candidates = 0
    for f in filters:
        if f.layout not in ("rows", "gfl"):
            continue  # this tool builds the anchor-major (NanoDet) layout only
        data, index = _rows(dense[f.output], f.threshold, dtype)
        candidates += int((index >= 0).sum())
        sparse[f.output] = CandidateRows(data, index, dense[f.output].shape, axis=1)
        if f.companion:
            comp = np.zeros((len(frames), index.shape[1], dense[f.companion].shape[2]), dtype)
            for i in range(len(frames)):
                k = index[i][index[i] >= 0]
                comp[i, : len(k)] = dense[f.companion][i][k]
            sparse[f.companion] = CandidateRows(comp, index, dense[f.companion].shape, axis=1)

    def best_ms(outputs: dict[str, Any]) -> float:
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            dec.decode(outputs, transforms)
            best = min(best, time.perf_counter() - t0)
        return round(best * 1e3, 3)

    gfl = [f for f in filters if f.layout == "gfl"]
    boxes: dict[str, Any] = {**dense, **gfl_records(dense, gfl)} if gfl else {}
    final: dict[str, Any] = {**boxes, **{f.output: gfl_nms_reference(boxes[f.output], f) for f in gfl}}
    detections = sum(len(d.detections) for d in dec.decode(sparse, transforms))
    doc = {
        "command": "python tools/bench/decode_bench.py " + " ".join(argv),
        "machine": machine(),
        "load_at_start": load(),
        "numpy": np.__version__,
        "model": args.model.name,
        "batch": len(frames),
        "candidate_cells": candidates,
        "detections": detections,
        "timing": f"best of {args.repeats}",
        "dense_ms_per_batch": best_ms(dense),
        "candidates_ms_per_batch": best_ms(sparse),
        **(
            {
                "gpu_boxes_ms_per_batch": best_ms(boxes),
                "box_records": int(boxes[gfl[0].output].frame.size),
                "gpu_nms_ms_per_batch": best_ms(final),
            }
            if gfl
            else {}
        ),
    }
    emit(doc, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
