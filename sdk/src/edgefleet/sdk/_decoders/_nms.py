"""Non-maximum suppression over (N, 4) x1,y1,x2,y2 boxes in groups (a class, or a class in one frame of
a batch), in numpy.

Greedy NMS, best score first: a box is kept unless a kept box of its own group, scored higher (ties: earlier
in the input), overlaps it by more than the threshold. :func:`nms_groups` works a whole batch at once:

* pairs: the IoU of every pair of boxes in the same group, in one vectorised pass, then the greedy rule
  solved by iteration: "kept = not suppressed by any kept box before it" is re-evaluated for all boxes at
  once until nothing changes; on the order the boxes are sorted in it has one solution, reached after at
  most as many rounds as the longest chain of boxes suppressing each other (a handful in practice);
* blocks, when a group holds more than ``_PAIRS_UP_TO`` boxes (a crowd: the pairs grow as its square and
  the chains with it, ``tools/bench/nms_bench.py``): the boxes, sorted by group and then best
  first, a block of ``_BLOCK`` at a time; the block's own IoU matrix settles which of them survive (a loop
  over small boolean rows), then the survivors of the block's last group (the only one that can go on
  past the block) suppress the rest of that group in one step.

Both keep exactly what the textbook loop (:func:`nms_simple`, one IoU row and a dozen numpy calls per
kept box) keeps (tests compare them), with far fewer numpy calls (``tools/bench/nms_bench.py``); a batch
of 32 frames costs one call, not 32.
"""

from __future__ import annotations

import numpy as np

__all__ = ["nms", "nms_groups", "nms_simple"]

_BLOCK = 64
_PAIRS_UP_TO = 128  # a group larger than this (a crowd of one class): blocks, whose cost grows slower


def _areas(b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.maximum(b[:, 2] - b[:, 0], 0) * np.maximum(b[:, 3] - b[:, 1], 0)
    return out


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
    """The textbook loop (the reference the others are tested against): indices kept, best first."""
    if boxes.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    b = boxes.astype(np.float32)
    areas = _areas(b)
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size and len(keep) < limit:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        overlap = _overlap(b[i : i + 1], areas[i : i + 1], b[rest], areas[rest])[0]
        # "not <= iou" rather than "> iou": a NaN overlap suppresses
        order = rest[~((classes[rest] == classes[i]) & ~(overlap <= iou))]
    return np.asarray(keep, dtype=np.int64)


def _pairs_within_groups(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (i, j), i < j, of positions with the same group, for ``g`` sorted."""
    n = g.size
    after = np.searchsorted(g, g, side="right") - np.arange(n) - 1  # later boxes of the same group
    total = int(after.sum())
    i = np.repeat(np.arange(n), after)
    first = np.cumsum(after) - after  # where each i's run of pairs starts
    j = i + 1 + (np.arange(total) - np.repeat(first, after))
    return i, j


def _greedy_pairs(b: np.ndarray, areas: np.ndarray, g: np.ndarray, iou: float) -> np.ndarray:
    i, j = _pairs_within_groups(g)
    xx1 = np.maximum(b[i, 0], b[j, 0])
    yy1 = np.maximum(b[i, 1], b[j, 1])
    xx2 = np.minimum(b[i, 2], b[j, 2])
    yy2 = np.minimum(b[i, 3], b[j, 3])
    inter = np.maximum(xx2 - xx1, 0) * np.maximum(yy2 - yy1, 0)
    union = areas[i] + areas[j] - inter
    overlap = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    hit = ~(overlap <= iou)  # "not <= iou": a NaN overlap suppresses, as in nms_simple
    i, j = i[hit], j[hit]  # i (earlier, better) would suppress j
    keep = np.ones(g.size, dtype=bool)
    while True:
        nxt = np.ones(g.size, dtype=bool)
        nxt[j[keep[i]]] = False
        if np.array_equal(nxt, keep):
            return keep
        keep = nxt


def _greedy_blocks(b: np.ndarray, areas: np.ndarray, g: np.ndarray, iou: float, limit: int | None) -> np.ndarray:
    n = g.size
    counts: dict[int, int] = {}  # boxes kept so far, by group
    keep = np.zeros(n, dtype=bool)
    group_end = np.searchsorted(g, g, side="right")  # where each box's group ends
    suppressed = np.zeros(n, dtype=bool)
    for start in range(0, n, _BLOCK):
        end = min(start + _BLOCK, n)
        alive = ~suppressed[start:end]
        if not alive.any():
            continue
        gb = g[start:end]
        within = ~(_overlap(b[start:end], areas[start:end], b[start:end], areas[start:end]) <= iou)
        within &= gb[:, None] == gb[None, :]
        local: list[int] = []
        for k in np.flatnonzero(alive).tolist():
            if not alive[k]:
                continue  # suppressed by a better box of this block
            local.append(k)
            group = int(gb[k])
            counts[group] = counts.get(group, 0) + 1
            if limit is not None and counts[group] >= limit:  # the rest of this group can never make it
                alive &= gb != gb[k]
                suppressed[start + k + 1 : int(group_end[start + k])] = True
            else:
                alive &= ~within[k]
        kept = start + np.asarray(local, dtype=np.int64)
        keep[kept] = True
        stop = int(group_end[end - 1])  # only the block's last group can go on past it
        if stop > end and kept.size:
            last = kept[g[kept] == g[end - 1]]
            if last.size:
                hit = ~(_overlap(b[last], areas[last], b[end:stop], areas[end:stop]) <= iou)
                suppressed[end:stop] |= hit.any(axis=0)
    return keep


def nms_groups(
    boxes: np.ndarray, scores: np.ndarray, groups: np.ndarray, iou: float, limit: int | None = None
) -> np.ndarray:
    """Boolean mask of the boxes kept; boxes of different groups never suppress each other. ``limit``: a
    group's boxes past its ``limit`` best kept ones may be dropped (they would be cut anyway where at most
    ``limit`` are kept per frame, and a frame's groups are among its own boxes): crowded groups stop early."""
    n = boxes.shape[0]
    if n == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort((-scores, groups))  # by group, best first within it (stable: ties in input order)
    b = boxes[order].astype(np.float32)
    areas = _areas(b)
    g = np.asarray(groups)[order]
    largest = int(np.diff(np.flatnonzero(np.r_[True, g[1:] != g[:-1], True])).max())
    pairs = largest <= _PAIRS_UP_TO
    kept = _greedy_pairs(b, areas, g, iou) if pairs else _greedy_blocks(b, areas, g, iou, limit)
    mask = np.zeros(n, dtype=bool)
    mask[order[kept]] = True
    return mask


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float, limit: int) -> np.ndarray:
    """Indices kept, best first (at most ``limit``). Boxes of different classes never suppress each other."""
    if boxes.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    kept = nms_groups(boxes, scores, classes, iou, limit)
    order = np.argsort(-scores, kind="stable")
    out: np.ndarray = order[kept[order]][:limit]
    return out
