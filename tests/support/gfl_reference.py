"""What the ``ef_gfl_boxes`` and ``ef_gfl_nms`` kernels produce, computed on the host with the same float32
formulas: the reference the GPU tests hold the kernels to, and how CPU tests and
``tools/bench/decode_bench.py`` build :class:`BoxCandidates` without a GPU."""

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


def _iou(a: np.ndarray, b: np.ndarray) -> np.float32:
    """One pair's IoU in float32, step by step as numpy's NMS computes it."""
    f = np.float32
    area_a = f(max(a[2] - a[0], f(0))) * f(max(a[3] - a[1], f(0)))
    area_b = f(max(b[2] - b[0], f(0))) * f(max(b[3] - b[1], f(0)))
    w = f(max(f(min(a[2], b[2])) - f(max(a[0], b[0])), f(0)))
    h = f(max(f(min(a[3], b[3])) - f(max(a[1], b[1])), f(0)))
    inter = f(w * h)
    union = f(f(area_a + area_b) - inter)
    return f(inter / union) if union > 0 else f(0)


def gfl_nms_reference(records: BoxCandidates, f: CandidateFilter) -> BoxCandidates:
    """The textbook per-frame loop the device NMS must equal: the allowed classes, best score first
    (ties: lower cell, then lower class), the first ``pre_nms_top_k``, greedy within a class, at most
    ``max_detections``; the result is ``final``."""
    iou = np.float32(f.nms_iou if f.nms_iou is not None else 1.0)
    keep_rows: list[int] = []
    for n in range(records.shape[0]):
        rows = np.flatnonzero(records.frame == n)
        if f.keep_classes is not None:
            rows = rows[np.isin(records.cls[rows], f.keep_classes)]
        rows = rows[np.lexsort((records.cls[rows], records.cell[rows], -records.score[rows]))][: f.pre_nms_top_k]
        kept: list[int] = []
        for r in rows.tolist():
            if len(kept) >= f.max_detections:
                break
            same = [k for k in kept if records.cls[k] == records.cls[r]]
            if all(_iou(records.box[k], records.box[r]) <= iou for k in same):
                kept.append(r)
        keep_rows.extend(kept)
    k = np.asarray(keep_rows, np.int64)
    return BoxCandidates(
        records.frame[k], records.cell[k], records.cls[k], records.score[k], records.box[k], records.nonfinite,
        records.shape, records.first, final=True,
    )  # fmt: skip
