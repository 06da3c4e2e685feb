"""Class-aware non-maximum suppression over (N, 4) x1,y1,x2,y2 boxes, in numpy."""

from __future__ import annotations

import numpy as np

__all__ = ["nms"]


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float, limit: int) -> np.ndarray:
    """Indices kept, best first. Boxes of different classes never suppress each other."""
    if boxes.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    # Offset each class far apart so one pass handles every class.
    offset = classes.astype(np.float32)[:, None] * (float(boxes.max()) + 1.0)
    b = boxes.astype(np.float32) + offset
    x1, y1, x2, y2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    areas = np.maximum(x2 - x1, 0) * np.maximum(y2 - y1, 0)
    order = np.argsort(-scores, kind="stable")
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
