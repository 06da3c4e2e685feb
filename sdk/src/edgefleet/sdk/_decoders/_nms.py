"""Class-aware non-maximum suppression over (N, 4) x1,y1,x2,y2 boxes, in numpy.

Greedy NMS, best score first, worked a block of ``_BLOCK`` candidates at a time: the block's own IoU
matrix settles which of them survive (a loop over small boolean rows), then the survivors suppress the
rest of the list in one vectorised step. It keeps exactly what the textbook loop (:func:`nms_simple`,
one IoU row and a dozen numpy calls per kept box) keeps, in the same order, with far fewer numpy calls
(``tools/bench/nms_bench.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["nms", "nms_simple"]

_BLOCK = 64


def _prepare(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boxes offset by class (so one pass handles every class), their areas, best-first order."""
    offset = classes.astype(np.float32)[:, None] * (float(boxes.max()) + 1.0)
    b = boxes.astype(np.float32) + offset
    areas = np.maximum(b[:, 2] - b[:, 0], 0) * np.maximum(b[:, 3] - b[:, 1], 0)
    return b, areas, np.argsort(-scores, kind="stable")


def _overlap(a: np.ndarray, area_a: np.ndarray, b: np.ndarray, area_b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` (rows) with every box of ``b`` (columns), 0 where the union is empty."""
    xx1 = np.maximum(a[:, None, 0], b[None, :, 0])
    yy1 = np.maximum(a[:, None, 1], b[None, :, 1])
    xx2 = np.minimum(a[:, None, 2], b[None, :, 2])
    yy2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.maximum(xx2 - xx1, 0) * np.maximum(yy2 - yy1, 0)
    union = area_a[:, None] + area_b[None, :] - inter
    out: np.ndarray = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    return out


def nms_simple(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float, limit: int) -> np.ndarray:
    """The textbook loop (the decoders' NMS until the blocked one): indices kept, best first."""
    if boxes.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    b, areas, order = _prepare(boxes, scores, classes)
    x1, y1, x2, y2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    keep: list[int] = []
    while order.size and len(keep) < limit:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        xx1 = np.maximum(x1[i], x1[rest])
        yy1 = np.maximum(y1[i], y1[rest])
        xx2 = np.minimum(x2[i], x2[rest])
        yy2 = np.minimum(y2[i], y2[rest])
        inter = np.maximum(xx2 - xx1, 0) * np.maximum(yy2 - yy1, 0)
        union = areas[i] + areas[rest] - inter
        overlap = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = rest[overlap <= iou]
    return np.asarray(keep, dtype=np.int64)


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float, limit: int) -> np.ndarray:
    """Indices kept, best first. Boxes of different classes never suppress each other."""
    n = boxes.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    b, areas, order = _prepare(boxes, scores, classes)
    sb, sa = b[order], areas[order]  # best first
    suppressed = np.zeros(n, dtype=bool)
    keep: list[int] = []
    for start in range(0, n, _BLOCK):
        end = min(start + _BLOCK, n)
        alive = ~suppressed[start:end]
        if not alive.any():
            continue
        # "not <= iou" rather than "> iou": a NaN overlap suppresses, as in nms_simple
        within = ~(_overlap(sb[start:end], sa[start:end], sb[start:end], sa[start:end]) <= iou)
        local: list[int] = []
        for j in np.flatnonzero(alive).tolist():
            if not alive[j]:
                continue  # suppressed by a better box of this block
            local.append(j)
            if len(keep) + len(local) >= limit:
                break
            alive &= ~within[j]
        kept = start + np.asarray(local, dtype=np.int64)
        keep.extend(kept.tolist())
        if len(keep) >= limit or end == n:
            break
        suppressed[end:] |= (~(_overlap(sb[kept], sa[kept], sb[end:], sa[end:]) <= iou)).any(axis=0)
    return order[np.asarray(keep, dtype=np.int64)]
