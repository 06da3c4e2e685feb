"""What the analytics stages add to an annotated frame: track ids and trails, zones, lines, counters."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from .._results import Result

__all__ = ["Trails", "draw_regions", "draw_tracks", "track_colour"]

_FONT = 0  # cv2.FONT_HERSHEY_SIMPLEX
_TRACK_COLOURS = np.array(
    [
        [255, 128, 0],
        [0, 200, 255],
        [200, 0, 255],
        [0, 255, 128],
        [255, 0, 128],
        [128, 255, 0],
        [0, 128, 255],
        [255, 200, 0],
        [128, 0, 255],
        [0, 255, 255],
        [255, 64, 64],
        [64, 255, 64],
    ]
)
_ZONE = (0, 220, 255)
_LINE = (255, 0, 255)


def track_colour(track_id: int) -> tuple[int, int, int]:
    c = _TRACK_COLOURS[track_id % len(_TRACK_COLOURS)]
    return int(c[0]), int(c[1]), int(c[2])


class Trails:
    """The recent anchor points of every track, per stream (what a trail is drawn from)."""

    def __init__(self, length: int = 30, forget_after: int = 60) -> None:
        self.length = length
        self.forget_after = forget_after
        self._points: dict[str, dict[int, tuple[int, deque[tuple[int, int]]]]] = {}

    def forget(self, stream_id: str) -> None:
        """A stream left: its trails go."""
        self._points.pop(stream_id, None)

    def update(self, result: Result) -> dict[int, deque[tuple[int, int]]]:
        tracks = self._points.setdefault(result.stream_id, {})
        for d in result.detections:
            if d.track_id is None:
                continue
            x1, _, x2, y2 = d.box
            entry = tracks.get(d.track_id)
            if entry is None:
                entry = (result.sequence, deque(maxlen=self.length))
            entry[1].append((round((x1 + x2) / 2), round(y2)))
            tracks[d.track_id] = (result.sequence, entry[1])
        for e in result.ended_tracks:
            tracks.pop(e.track_id, None)
        stale = [tid for tid, (seen, _) in tracks.items() if result.sequence - seen > self.forget_after]
        for tid in stale:
            del tracks[tid]
        return {tid: pts for tid, (_, pts) in tracks.items()}


def draw_tracks(cv2: Any, image: np.ndarray, result: Result, trails: Trails | None) -> set[int]:
    """Boxes of tracked detections in their track's colour with ``label #id``, and their trails. Returns
    the indices of the detections drawn (the caller draws the others as plain detections)."""
    drawn = set()
    points = trails.update(result) if trails is not None else {}
    for tid, pts in points.items():
        if len(pts) > 1:
            cv2.polylines(image, [np.array(pts, np.int32)], False, track_colour(tid), 2, cv2.LINE_AA)
    for i, det in enumerate(result.detections):
        if det.track_id is None:
            continue
        drawn.add(i)
        colour = track_colour(det.track_id)
        x1, y1, x2, y2 = (round(v) for v in det.box)
        cv2.rectangle(image, (x1, y1), (x2, y2), colour, 2)
        _label(cv2, image, f"{det.label} #{det.track_id}", x1, y1, colour)
    return drawn


def draw_regions(cv2: Any, image: np.ndarray, result: Result) -> None:
    """Zones (outline, name, objects inside and entries) and lines (with an arrow pointing to their
    ``in`` side and the counts each way)."""
    for region in result.regions:
        pts = np.array(region.points, np.float64)
        if region.kind == "zone":
            cv2.polylines(image, [pts.round().astype(np.int32)], True, _ZONE, 2, cv2.LINE_AA)
            x, y = pts[:, 0].min(), pts[:, 1].min()
            text = f"{region.name}: {_total(region.inside)} inside, {_total(region.in_total)} in"
            _label(cv2, image, text, round(x), round(y) + 18, _ZONE)
            continue
        a, b = pts[0], pts[1]
        cv2.line(image, _pt(a), _pt(b), _LINE, 3, cv2.LINE_AA)
        mid = (a + b) / 2
        d = b - a
        normal = np.array([-d[1], d[0]]) / (float(np.hypot(d[0], d[1])) or 1.0)  # the right-hand side, y down
        cv2.arrowedLine(image, _pt(mid), _pt(mid + 30 * normal), _LINE, 2, cv2.LINE_AA, tipLength=0.4)
        text = f"{region.name}: in {_total(region.in_total)} out {_total(region.out_total)}"
        _label(cv2, image, text, round(mid[0] - 30 * normal[0]), round(mid[1] - 30 * normal[1]), _LINE)


def _total(counts: Any) -> int:
    return int(sum(counts.values()))


def _pt(p: np.ndarray) -> tuple[int, int]:
    return round(float(p[0])), round(float(p[1]))


def _label(cv2: Any, image: np.ndarray, text: str, x: int, y: int, colour: tuple[int, int, int]) -> None:
    (tw, th), _ = cv2.getTextSize(text, _FONT, 0.5, 1)
    h, w = image.shape[:2]
    x = min(max(0, x), max(0, w - tw - 4))
    y = min(max(th + 4, y), h - 1)
    cv2.rectangle(image, (x, y - th - 4), (x + tw + 4, y), colour, -1)
    cv2.putText(image, text, (x + 2, y - 3), _FONT, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
