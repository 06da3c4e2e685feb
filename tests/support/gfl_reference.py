"""What the ``ef_gfl_boxes`` kernels produce, computed on the host with the same float32 formulas: the
reference the GPU tests hold the kernels to, and how CPU tests and ``tools/bench/decode_bench.py`` build
:class:`BoxCandidates` without a GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from edgefleet.sdk._sparse import BoxCandidates, CandidateFilter, ConsumedOutput


def _distances(reg: np.ndarray, bins: int, stride: float) -> np.ndarray:
    """(k, 4 * bins) -> (k, 4): each side's softmax expectation over its bins, summed bin by bin in
    order as each kernel lane does, times the stride."""
    r = reg.astype(np.float32).reshape(-1, 4, bins)
    e = np.exp(r - r.max(axis=2, keepdims=True))
    p = e / e.sum(axis=2, keepdims=True)
    acc = np.zeros(r.shape[:2], np.float32)
    for i in range(bins):
        acc += p[:, :, i] * np.float32(i)
    return np.asarray(acc * np.float32(stride), np.float32)


def gfl_records(outputs: Mapping[str, np.ndarray], filters: Sequence[CandidateFilter]) -> dict[str, object]:
    """The dense outputs of a GFL head -> {score output: BoxCandidates, distribution output: ConsumedOutput}."""
    frames, cells, classes, scores, boxes = [], [], [], [], []
    n = next(iter(outputs.values())).shape[0]
    nonfinite = np.zeros(n, bool)
    for f in filters:
        sc = np.asarray(outputs[f.output]).astype(np.float32)
        reg = np.asarray(outputs[f.companion or ""])
        nonfinite |= (~np.isfinite(sc)).any(axis=(1, 2))
        best = sc.argmax(axis=2)  # lowest index on ties, as the kernel's arg-max
        best_v = np.take_along_axis(sc, best[:, :, None], axis=2)[:, :, 0]
        kept = best_v > f.threshold
        if f.multi_label:
            fi, ai, ci = np.nonzero((sc > f.threshold) & kept[:, :, None])
        else:
            fi, ai = np.nonzero(kept)
            ci = best[fi, ai]
        fk, ak = np.nonzero(kept)
        dist_all = _distances(reg[fk, ak], f.bins, f.stride)
        nonfinite[fk[~np.isfinite(dist_all).all(axis=1)]] = True
        lookup = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(fk, ak, strict=True))}
        rows = np.array([lookup[(int(a), int(b))] for a, b in zip(fi, ai, strict=True)], np.int64)
        dist = dist_all[rows] if rows.size else np.zeros((0, 4), np.float32)
        s = np.float32(f.stride)
        cx = ((ai % f.grid_width).astype(np.float32) + np.float32(0.5)) * s
        cy = ((ai // f.grid_width).astype(np.float32) + np.float32(0.5)) * s
        box = np.stack([cx - dist[:, 0], cy - dist[:, 1], cx + dist[:, 2], cy + dist[:, 3]], axis=1)
        frames.append(fi)
        cells.append(ai + f.first)
        classes.append(ci)
        scores.append(sc[fi, ai, ci])
        boxes.append(box.astype(np.float32))
    frame, cell, cls = (np.concatenate(a).astype(np.int64) for a in (frames, cells, classes))
    score, box = np.concatenate(scores).astype(np.float32), np.concatenate(boxes).reshape(-1, 4)
    order = np.lexsort((cls, cell, frame))
    out: dict[str, object] = {}
    for f in filters:
        sc = outputs[f.output]
        out[f.output] = BoxCandidates(
            frame[order], cell[order], cls[order], score[order], box[order], nonfinite, sc.shape, f.first
        )
        reg = outputs[f.companion or ""]
        out[f.companion or ""] = ConsumedOutput(reg.shape, reg.dtype, nonfinite)
    return out
