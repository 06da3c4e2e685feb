"""Zones and lines over tracked objects: who is inside, for how long, who crossed which way; counts.

State is kept per stream and per region (zone or line), keyed by track id. An object's position is an
anchor point of its box (the bottom centre by default: where a person stands). The engine takes a whole
batch (many streams, several frames of one stream in order) at once: the geometry (anchors, inside a
zone, side of a line) is a few numpy calls per region for every object of the batch (``_geometry``); the
per-object bookkeeping is then plain Python on those results, a dictionary lookup per object and region,
frame by frame in order. A region a stream does not have costs that stream nothing.

Zones: an object enters after ``min_frames`` consecutive frames inside and leaves after ``min_frames``
outside (or when its track ends while inside); a ``dwell`` event fires once per visit when it has been
inside for ``dwell_s``. Lines: an object's side is the sign of its distance from the line, ignored within
``margin_px`` of it (so an object standing on the line does not count again and again); a crossing is a
change of side whose path meets the line between its two end points. ``in`` is a crossing to the
right-hand side of the line as drawn from its first point to its second (on the image, y down: for a line
drawn left to right, moving down the picture).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._results import AnalyticsEvent, RegionCounts
from ._geometry import anchors, crossing_inside_segment, inside_polygon, signed_distance

__all__ = ["BatchObjects", "Ended", "FrameRef", "RegionEngine", "RegionSpec"]


@dataclass(frozen=True)
class RegionSpec:
    """A zone (3+ points) or a line (2 points) as the engine uses it."""

    name: str
    kind: str  # "zone" | "line"
    points: tuple[tuple[float, float], ...]
    normalized: bool = False
    streams: frozenset[str] | None = None
    classes: frozenset[str] | None = None
    anchor: str = "bottom_center"
    dwell_s: float | None = None
    min_frames: int = 1
    margin_px: float = 2.0


@dataclass
class BatchObjects:
    """The tracked objects (confirmed tracks only) of a whole batch, frame after frame: frame ``i``'s
    are rows ``offsets[i]:offsets[i + 1]``."""

    ids: list[int]
    labels: list[str]
    class_ids: list[int]
    boxes: np.ndarray  # (N, 4)
    offsets: list[int]
    _anchors: dict[str, np.ndarray] = field(default_factory=dict)

    def anchors(self, where: str) -> np.ndarray:
        """(N, 2) anchor points, computed once per batch and kind."""
        got = self._anchors.get(where)
        if got is None:
            got = self._anchors[where] = anchors(self.boxes, where)
        return got

    def box(self, k: int) -> tuple[float, float, float, float]:
        b = self.boxes[k]
        return (float(b[0]), float(b[1]), float(b[2]), float(b[3]))


@dataclass(frozen=True)
class FrameRef:
    """One frame of the batch: its stream, capture time (seconds), size and the tracks that ended on it."""

    stream: str
    t: float
    width: int
    height: int
    ended: Sequence[Ended] = ()


@dataclass(frozen=True)
class Ended:
    track_id: int
    label: str
    class_id: int
    box: tuple[float, float, float, float]
    last_seen: float


@dataclass
class _Visit:
    since: float
    label: str
    dwelt: bool = False
    outside: int = 0  # consecutive frames seen outside


@dataclass
class _Counts:
    """Totals by label, and the same over the last ``window_s`` seconds (kept as it goes: each event is
    added once and taken off once when it leaves the window)."""

    window_s: float
    total_in: Counter[str] = field(default_factory=Counter)
    total_out: Counter[str] = field(default_factory=Counter)
    window_in: Counter[str] = field(default_factory=Counter)
    window_out: Counter[str] = field(default_factory=Counter)
    recent: deque[tuple[float, str, bool]] = field(default_factory=deque)  # (time, label, is_in)

    def add(self, t: float, label: str, is_in: bool) -> None:
        (self.total_in if is_in else self.total_out)[label] += 1
        (self.window_in if is_in else self.window_out)[label] += 1
        self.recent.append((t, label, is_in))

    def expire(self, t: float) -> bool:
        changed = False
        while self.recent and self.recent[0][0] < t - self.window_s:
            _, label, is_in = self.recent.popleft()
            counts = self.window_in if is_in else self.window_out
            counts[label] -= 1
            if counts[label] == 0:
                del counts[label]
            changed = True
        return changed

    def window(self) -> tuple[dict[str, int], dict[str, int]]:
        return dict(self.window_in), dict(self.window_out)


@dataclass
class _Geometry:
    """One region shape's verdict on every object of the batch, as Python lists: zones ``inside``
    (bool), lines ``side`` (-1, +1, 0 within the margin) with the anchor points ``x``, ``y``."""

    inside: list[bool] = field(default_factory=list)
    side: list[int] = field(default_factory=list)
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)


class _Region:
    """One region on one stream."""

    def __init__(self, spec: RegionSpec, index: int, width: int, height: int, window_s: float) -> None:
        self.spec = spec
        self.index = index  # the spec's place in the engine's list
        #: regions of one spec and shape see the batch's objects the same way (one geometry for them)
        self.shape_key: tuple[int, tuple[int, int] | None] = (index, (width, height) if spec.normalized else None)
        pts = np.array(spec.points, np.float64)
        if spec.normalized:
            pts = pts * np.array([width, height], np.float64)
        self.size = (width, height)
        self.pts = pts
        self.counts = _Counts(window_s)
        self.edges = (pts, np.roll(pts, -1, axis=0))
        self.members: dict[int, _Visit] = {}
        self.pending: dict[int, int] = {}  # zones: consecutive frames inside before entering
        self.sides: dict[int, list[Any]] = {}  # lines: per track [side (-1, +1), x, y] where it last was firmly

    def geometry(self, objs: BatchObjects) -> _Geometry:
        """This region's shape against every object of the batch (a few numpy calls)."""
        pts = objs.anchors(self.spec.anchor)
        if self.spec.kind == "zone":
            return _Geometry(inside=inside_polygon(pts, self.pts, self.edges).tolist())
        dist = signed_distance(pts, self.pts[0], self.pts[1])
        margin = self.spec.margin_px
        side = np.where(dist > margin, 1, np.where(dist < -margin, -1, 0))
        return _Geometry(side=side.tolist(), x=pts[:, 0].tolist(), y=pts[:, 1].tolist())

    def update(
        self,
        objs: BatchObjects,
        lo: int,
        hi: int,
        geo: _Geometry,
        wanted: list[bool] | None,
        frame: FrameRef,
        out: list[AnalyticsEvent],
    ) -> bool:
        """Advance by one frame (objects ``lo:hi`` of the batch); append events to ``out``; True when the
        counts changed."""
        if lo == hi and not frame.ended and not self.members and not self.counts.recent:
            return False  # nothing on this frame for it, nobody inside, nothing to expire
        t = frame.t
        changed = self.counts.expire(t)
        if self.spec.kind == "zone":
            changed |= self._zone(objs, lo, hi, geo.inside, wanted, t, out)
        else:
            changed |= self._line(objs, lo, hi, geo, wanted, t, out)
        for e in frame.ended:
            visit = self.members.pop(e.track_id, None)
            self.pending.pop(e.track_id, None)
            self.sides.pop(e.track_id, None)
            if visit is not None:
                out.append(
                    AnalyticsEvent(
                        "leave", self.spec.name, e.track_id, e.label, e.class_id, e.box, "", e.last_seen - visit.since
                    )
                )
                self.counts.add(t, visit.label, False)
                changed = True
        return changed

    def _zone(
        self,
        objs: BatchObjects,
        lo: int,
        hi: int,
        ins: list[bool],
        wanted: list[bool] | None,
        t: float,
        out: list[AnalyticsEvent],
    ) -> bool:
        spec = self.spec
        members, pending, min_frames = self.members, self.pending, spec.min_frames
        changed = False
        for k in range(lo, hi):
            if wanted is not None and not wanted[k]:
                continue
            tid, inside = objs.ids[k], ins[k]
            visit = members.get(tid)
            if visit is None:
                if not inside:
                    if pending:
                        pending.pop(tid, None)
                    continue
                n = pending.get(tid, 0) + 1
                if n < min_frames:
                    pending[tid] = n
                    continue
                pending.pop(tid, None)
                label = objs.labels[k]
                members[tid] = _Visit(t, label)
                out.append(AnalyticsEvent("enter", spec.name, tid, label, objs.class_ids[k], objs.box(k)))
                self.counts.add(t, label, True)
                changed = True
            elif inside:
                visit.outside = 0
            else:
                visit.outside += 1
                if visit.outside >= min_frames:
                    del members[tid]
                    out.append(
                        AnalyticsEvent(
                            "leave", spec.name, tid, visit.label, objs.class_ids[k], objs.box(k), "", t - visit.since
                        )
                    )
                    self.counts.add(t, visit.label, False)
                    changed = True
        if spec.dwell_s is not None:
            for tid, visit in members.items():
                if not visit.dwelt and t - visit.since >= spec.dwell_s:
                    visit.dwelt = True
                    at = _index(objs, lo, hi, tid)
                    box = objs.box(at) if at is not None else (0.0, 0.0, 0.0, 0.0)
                    cls = objs.class_ids[at] if at is not None else -1
                    out.append(AnalyticsEvent("dwell", spec.name, tid, visit.label, cls, box, "", t - visit.since))
        return changed

    def _line(
        self,
        objs: BatchObjects,
        lo: int,
        hi: int,
        geo: _Geometry,
        wanted: list[bool] | None,
        t: float,
        out: list[AnalyticsEvent],
    ) -> bool:
        sides, side_of, xs, ys = self.sides, geo.side, geo.x, geo.y
        flips: list[tuple[int, int, float, float]] = []  # (object, new side, where it was before)
        for k in range(lo, hi):
            now = side_of[k]
            if now == 0 or (wanted is not None and not wanted[k]):
                continue
            tid = objs.ids[k]
            last = sides.get(tid)
            if last is None:
                sides[tid] = [now, xs[k], ys[k]]
                continue
            if last[0] != now:
                flips.append((k, now, last[1], last[2]))
            last[0], last[1], last[2] = now, xs[k], ys[k]
        if not flips:
            return False
        ks = [f[0] for f in flips]
        p0 = np.array([(f[2], f[3]) for f in flips], np.float64)
        p1 = np.array([(xs[k], ys[k]) for k in ks], np.float64)
        hit = crossing_inside_segment(p0, p1, self.pts[0], self.pts[1]).tolist()
        changed = False
        for (k, side, _, _), crossed in zip(flips, hit, strict=True):
            if not crossed:
                continue
            direction = "in" if side > 0 else "out"
            label = objs.labels[k]
            out.append(
                AnalyticsEvent("cross", self.spec.name, objs.ids[k], label, objs.class_ids[k], objs.box(k), direction)
            )
            self.counts.add(t, label, side > 0)
            changed = True
        return changed

    def counts_now(self) -> RegionCounts:
        inside: dict[str, int] = {}
        if self.spec.kind == "zone":
            inside = dict(Counter(v.label for v in self.members.values()))
        w_in, w_out = self.counts.window()
        pts = tuple((float(x), float(y)) for x, y in self.pts)
        return RegionCounts(
            self.spec.name,
            self.spec.kind,
            pts,
            inside,
            dict(self.counts.total_in),
            dict(self.counts.total_out),
            w_in,
            w_out,
            self.counts.window_s,
        )


def _index(objs: BatchObjects, lo: int, hi: int, tid: int) -> int | None:
    for k in range(lo, hi):
        if objs.ids[k] == tid:
            return k
    return None


class RegionEngine:
    """Every region on every stream."""

    def __init__(self, specs: Sequence[RegionSpec], window_s: float) -> None:
        self.specs = list(specs)
        self.window_s = window_s
        self._streams: dict[str, list[_Region]] = {}
        self._snapshots: dict[str, tuple[RegionCounts, ...]] = {}
        self.events = 0

    def regions(self, stream: str, width: int, height: int) -> list[_Region]:
        regions = self._streams.get(stream)
        if regions is None or (regions and regions[0].size != (width, height)):
            old = {r.spec.name: r for r in regions or ()}
            regions = []
            for j, s in enumerate(self.specs):
                if s.streams is not None and stream not in s.streams:
                    continue
                r = _Region(s, j, width, height, self.window_s)
                if s.name in old:  # a new frame size: keep the counts, forget positions
                    r.counts = old[s.name].counts
                regions.append(r)
            self._streams[stream] = regions
            self._snapshots.pop(stream, None)
        return regions

    def update(
        self, frames: Sequence[FrameRef], objs: BatchObjects
    ) -> list[tuple[list[AnalyticsEvent], tuple[RegionCounts, ...]]]:
        """A batch: frames of any streams (each stream's in order), their objects in ``objs``. Per frame,
        its events and every region's counts on its stream."""
        geometry: dict[tuple[int, tuple[int, int] | None], _Geometry] = {}  # per spec and scaled shape
        wanted: dict[int, list[bool] | None] = {}  # per spec: which objects have a label it counts
        offsets = objs.offsets
        out = []
        for i, f in enumerate(frames):
            lo, hi = offsets[i], offsets[i + 1]
            events: list[AnalyticsEvent] = []
            regions = self.regions(f.stream, f.width, f.height)
            changed = False
            for r in regions:
                geo = geometry.get(r.shape_key)
                if geo is None:
                    geo = geometry[r.shape_key] = r.geometry(objs) if len(objs.ids) else _Geometry()
                j = r.index
                if j not in wanted:
                    classes = r.spec.classes
                    wanted[j] = None if classes is None else [lb in classes for lb in objs.labels]
                changed |= r.update(objs, lo, hi, geo, wanted[j], f, events)
            snap = self._snapshots.get(f.stream)
            if snap is None or changed:
                snap = self._snapshots[f.stream] = tuple(r.counts_now() for r in regions)
            self.events += len(events)
            out.append((events, snap))
        return out

    def drop_stream(self, stream: str) -> None:
        self._streams.pop(stream, None)
        self._snapshots.pop(stream, None)
