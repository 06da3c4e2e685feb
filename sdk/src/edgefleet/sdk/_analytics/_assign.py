"""Matching boxes to tracks for many streams and classes at once.

Tracks and detections carry a group number (one per stream and class): only pairs within one group are ever
compared, so one call handles every stream of a batch. Pairs whose cost passes the threshold form a sparse
bipartite graph; an edge that is the only one of both its track and its detection is a match as it stands
(every optimal assignment takes it), and only the groups left with competing edges go to the solver
(``lap.lapjv``, Jonker-Volgenant), each on its own small dense matrix. That gives the same
matches as one thresholded assignment over each group's whole matrix, at the cost of a few numpy calls
when (as on most frames) nothing competes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["group_pairs", "iou_dense", "iou_pairs", "match", "solver"]

_INVALID = 1e6  # cost of a pair over the threshold inside a group's dense matrix
_DENSE_MAX = 8192  # up to this many (track, detection) pairs, one dense matrix beats pair lists
_SOLVE_ONCE_MAX = 16384  # up to this many contested (track, detection) cells, one solver call for all groups


def solver() -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A minimum-cost assignment of a dense (rows, cols) matrix: (row indices, column indices) of the
    pairs, every row or column at most once, as many pairs as the matrix allows (rows or columns left
    over stay unassigned). ``lap.lapjv``; ImportError naming the extra when lap is missing."""
    try:
        import lap  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise ImportError("tracking needs lap: pip install 'edgefleet-sdk[analytics]'") from exc

    def lapjv(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _, x, _ = lap.lapjv(cost, extend_cost=True, cost_limit=_INVALID / 10)  # invalid pairs: never
        rows = np.flatnonzero(x >= 0)
        return rows, np.asarray(x[rows], np.int64)

    return lapjv


def group_pairs(track_groups: np.ndarray, det_groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (track, detection) index pair whose group numbers are equal, as two index arrays."""
    if len(track_groups) == 0 or len(det_groups) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty
    d_order = np.argsort(det_groups, kind="stable")
    d_sorted = det_groups[d_order]
    lo = np.searchsorted(d_sorted, track_groups, side="left")
    hi = np.searchsorted(d_sorted, track_groups, side="right")
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty
    ti = np.repeat(np.arange(len(track_groups)), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    offset = np.arange(total) - starts
    di = d_order[np.repeat(lo, counts) + offset]
    return ti, di


def iou_dense(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, M) IoU of every box of a with every box of b."""
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(iw, 0.0, None) * np.clip(ih, 0.0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.asarray(inter / np.where(union > 0, union, np.inf))


def iou_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of a[i] with b[i] for (N, 4) x1, y1, x2, y2 boxes."""
    iw = np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0])
    ih = np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1])
    inter = np.clip(iw, 0.0, None) * np.clip(ih, 0.0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a + area_b - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def match(
    track_boxes: np.ndarray,
    track_groups: np.ndarray,
    det_boxes: np.ndarray,
    det_groups: np.ndarray,
    max_cost: float,
    det_scores: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Match tracks to detections within groups, minimising the total cost ``1 - IoU`` (``1 - IoU·score``
    with ``det_scores``: ByteTrack's score fusion) over pairs costing at most ``max_cost``.

    Returns (track indices, detection indices) of the matches, each index at most once.
    """
    if len(track_groups) * len(det_groups) <= _DENSE_MAX:
        return _match_dense(track_boxes, track_groups, det_boxes, det_groups, max_cost, det_scores)
    return _match_sparse(track_boxes, track_groups, det_boxes, det_groups, max_cost, det_scores)


def _match_sparse(
    track_boxes: np.ndarray,
    track_groups: np.ndarray,
    det_boxes: np.ndarray,
    det_groups: np.ndarray,
    max_cost: float,
    det_scores: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`match` on lists of the pairs within groups: for many streams or objects at once."""
    ti, di = group_pairs(track_groups, det_groups)
    if len(ti) > 64:  # most pairs of a crowded group do not touch: drop them on one coordinate first
        near = (track_boxes[ti, 0] < det_boxes[di, 2]) & (det_boxes[di, 0] < track_boxes[ti, 2])
        ti, di = ti[near], di[near]
    if len(ti) == 0:
        return ti, di
    sim = iou_pairs(track_boxes[ti], det_boxes[di])
    if det_scores is not None:
        sim = sim * det_scores[di]
    cost = 1.0 - sim
    keep = cost <= max_cost
    ti, di, cost = ti[keep], di[keep], cost[keep]
    if len(ti) == 0:
        return ti, di
    t_deg = np.bincount(ti, minlength=len(track_groups))
    d_deg = np.bincount(di, minlength=len(det_groups))
    alone = (t_deg[ti] == 1) & (d_deg[di] == 1)
    out_t = [ti[alone]]
    out_d = [di[alone]]
    rest = ~alone
    if rest.any():
        rt, rd, rc = ti[rest], di[rest], cost[rest]
        rows, r_inv = np.unique(rt, return_inverse=True)
        cols, c_inv = np.unique(rd, return_inverse=True)
        assign = solver()
        if len(rows) * len(cols) <= _SOLVE_ONCE_MAX:
            # Every contested group in one matrix: pairs of two groups are priced out like invalid pairs of
            # one, so the solver never takes them and each group gets its own optimum (one call, not one
            # per group: with many streams of a crowded scene most batches have a contested group each).
            dense = np.full((len(rows), len(cols)), _INVALID)
            dense[r_inv, c_inv] = rc
            r, c = assign(dense)
            ok = dense[r, c] <= max_cost
            out_t.append(rows[r[ok]])
            out_d.append(cols[c[ok]])
            return np.concatenate(out_t), np.concatenate(out_d)
        groups = track_groups[rt]
        for g in np.unique(groups):
            sel = groups == g
            gt, gd, gc = rt[sel], rd[sel], rc[sel]
            rows, r_inv = np.unique(gt, return_inverse=True)
            cols, c_inv = np.unique(gd, return_inverse=True)
            dense = np.full((len(rows), len(cols)), _INVALID)
            dense[r_inv, c_inv] = gc
            r, c = assign(dense)
            ok = dense[r, c] <= max_cost
            out_t.append(rows[r[ok]])
            out_d.append(cols[c[ok]])
    return np.concatenate(out_t), np.concatenate(out_d)


def _match_dense(
    track_boxes: np.ndarray,
    track_groups: np.ndarray,
    det_boxes: np.ndarray,
    det_groups: np.ndarray,
    max_cost: float,
    det_scores: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`match` on one (tracks, detections) matrix: fewer numpy calls when both are few."""
    empty = np.zeros(0, np.int64)
    if len(track_groups) == 0 or len(det_groups) == 0:
        return empty, empty
    sim = iou_dense(track_boxes, det_boxes)
    if det_scores is not None:
        sim = sim * det_scores[None, :]
    cost = 1.0 - sim
    valid = (cost <= max_cost) & (track_groups[:, None] == det_groups[None, :])
    t_deg = valid.sum(axis=1)
    d_deg = valid.sum(axis=0)
    alone = valid & (t_deg == 1)[:, None] & (d_deg == 1)[None, :]
    mt, md = np.nonzero(alone)
    rest = valid & ~alone
    if not rest.any():
        return mt.astype(np.int64), md.astype(np.int64)
    rows = np.flatnonzero(rest.any(axis=1))
    cols = np.flatnonzero(rest.any(axis=0))
    sub = np.where(rest[np.ix_(rows, cols)], cost[np.ix_(rows, cols)], _INVALID)  # groups apart stay apart
    r, c = solver()(sub)
    ok = sub[r, c] <= max_cost
    return np.concatenate([mt, rows[r[ok]]]).astype(np.int64), np.concatenate([md, cols[c[ok]]]).astype(np.int64)
