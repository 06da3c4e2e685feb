"""Vectorised geometry for zones and lines: points in polygons, sides of a line, crossings."""

from __future__ import annotations

import numpy as np

__all__ = ["anchors", "crossing_inside_segment", "inside_polygon", "signed_distance"]


def anchors(boxes: np.ndarray, where: str) -> np.ndarray:
    """(N, 4) boxes → (N, 2) points: ``bottom_center`` (where an object stands) or ``center``."""
    x = (boxes[:, 0] + boxes[:, 2]) / 2.0
    y = boxes[:, 3] if where == "bottom_center" else (boxes[:, 1] + boxes[:, 3]) / 2.0
    return np.stack([x, y], axis=1)


def inside_polygon(
    points: np.ndarray, polygon: np.ndarray, edges: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """(N, 2) points in a (V, 2) polygon (even-odd rule; a point on an edge may fall either way).
    ``edges``: the polygon and itself rolled by one corner, when the caller keeps them."""
    if len(points) == 0:
        return np.zeros(0, bool)
    start, end = edges if edges is not None else (polygon, np.roll(polygon, -1, axis=0))
    px = points[:, 0][:, None]
    py = points[:, 1][:, None]
    x1, y1 = start[:, 0][None, :], start[:, 1][None, :]
    x2, y2 = end[:, 0][None, :], end[:, 1][None, :]
    straddles = (y1 > py) != (y2 > py)
    dy = np.where(y2 == y1, 1.0, y2 - y1)
    x_at = x1 + (py - y1) * (x2 - x1) / dy
    hits = straddles & (px < x_at)
    return np.asarray(hits.sum(axis=1) % 2 == 1)


def signed_distance(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance of each point from the line through a and b, positive on the right-hand side of the
    direction a → b as drawn on the image (y down)."""
    d = b - a
    length = float(np.hypot(d[0], d[1])) or 1.0
    return np.asarray((d[0] * (points[:, 1] - a[1]) - d[1] * (points[:, 0] - a[0])) / length)


def crossing_inside_segment(p0: np.ndarray, p1: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For paths p0[i] → p1[i] that change sides of the line through a, b: whether they cross it between
    a and b (the segment), not beyond its ends."""
    s0 = signed_distance(p0, a, b)
    s1 = signed_distance(p1, a, b)
    denom = np.where(s0 == s1, 1.0, s0 - s1)
    u = s0 / denom  # where along p0 → p1 the line is met
    cross = p0 + u[:, None] * (p1 - p0)
    d = b - a
    t = ((cross[:, 0] - a[0]) * d[0] + (cross[:, 1] - a[1]) * d[1]) / float(d[0] ** 2 + d[1] ** 2 or 1.0)
    return np.asarray((t >= 0.0) & (t <= 1.0))
