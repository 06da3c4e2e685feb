"""Zones and lines over tracked objects: who is inside, for how long, who crossed which way; counts.

State is kept per stream and per region (zone or line), keyed by track id. An object's position is an
anchor point of its box (the bottom centre by default: where a person stands). Geometry is vectorised
(``_geometry``); the per-object bookkeeping is a dictionary lookup for each tracked object.

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

import numpy as np

from .._results import AnalyticsEvent, RegionCounts
from ._geometry import anchors, crossing_inside_segment, inside_polygon, signed_distance

__all__ = ["Ended", "RegionEngine", "RegionSpec", "Tracked"]


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
class Tracked:
    """One frame's tracked objects (confirmed tracks only) as arrays and lists."""

    ids: np.ndarray
    labels: list[str]
    class_ids: list[int]
    boxes: np.ndarray  # (N, 4)
    _anchors: dict[str, np.ndarray] = field(default_factory=dict)

    def anchors(self, where: str) -> np.ndarray:
        """(N, 2) anchor points, computed once per frame and kind."""
        got = self._anchors.get(where)
        if got is None:
            got = self._anchors[where] = anchors(self.boxes, where)
        return got


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


class _Region:
    """One region on one stream."""

    def __init__(self, spec: RegionSpec, width: int, height: int, window_s: float) -> None:
        self.spec = spec
        pts = np.array(spec.points, np.float64)
        if spec.normalized:
            pts = pts * np.array([width, height], np.float64)
        self.size = (width, height)
        self.pts = pts
        self.counts = _Counts(window_s)
        self.edges = (pts, np.roll(pts, -1, axis=0))
        self.members: dict[int, _Visit] = {}
        self.pending: dict[int, int] = {}  # zones: consecutive frames inside before entering
        # lines: per track a slot in arrays of its side (-1, +1; 0: none yet) and where it last was firmly
        self.slots: dict[int, int] = {}
        self.free: list[int] = []
        self.side = np.zeros(64, np.int64)
        self.where = np.zeros((64, 2))

    def selected(self, objs: Tracked) -> np.ndarray:
        if self.spec.classes is None:
            return np.arange(len(objs.ids))
        return np.array([i for i, lb in enumerate(objs.labels) if lb in self.spec.classes], np.int64)

    def update(self, objs: Tracked, ended: Sequence[Ended], t: float, out: list[AnalyticsEvent]) -> bool:
        """Advance by one frame; append events to ``out``; True when the counts changed."""
        changed = self.counts.expire(t)
        sel = self.selected(objs)
        if self.spec.kind == "zone":
            changed |= self._zone(objs, sel, t, out)
        else:
            changed |= self._line(objs, sel, t, out)
        for e in ended:
            visit = self.members.pop(e.track_id, None)
            self.pending.pop(e.track_id, None)
            slot = self.slots.pop(e.track_id, None)
            if slot is not None:
                self.side[slot] = 0
                self.free.append(slot)
            if visit is not None:
                out.append(
                    AnalyticsEvent(
                        "leave", self.spec.name, e.track_id, e.label, e.class_id, e.box, "", e.last_seen - visit.since
                    )
                )
                self.counts.add(t, visit.label, False)
                changed = True
        return changed

    def _zone(self, objs: Tracked, sel: np.ndarray, t: float, out: list[AnalyticsEvent]) -> bool:
        spec = self.spec
        changed = False
        if len(sel):
            ins = inside_polygon(objs.anchors(spec.anchor)[sel], self.pts, self.edges)
            todo = zip(sel.tolist(), ins.tolist(), strict=True)
            if spec.min_frames == 1:  # only the objects whose side of the zone changed need bookkeeping
                members = self.members
                was = np.array([i in members for i in objs.ids[sel].tolist()], bool)
                todo = zip(sel[was != ins].tolist(), ins[was != ins].tolist(), strict=True)
            for k, inside in todo:
                tid = int(objs.ids[k])
                visit = self.members.get(tid)
                if visit is None:
                    if not inside:
                        self.pending.pop(tid, None)
                        continue
                    n = self.pending.get(tid, 0) + 1
                    if n < spec.min_frames:
                        self.pending[tid] = n
                        continue
                    self.pending.pop(tid, None)
                    self.members[tid] = _Visit(t, objs.labels[k])
                    out.append(
                        AnalyticsEvent("enter", spec.name, tid, objs.labels[k], objs.class_ids[k], _box(objs, k))
                    )
                    self.counts.add(t, objs.labels[k], True)
                    changed = True
                elif inside:
                    visit.outside = 0
                else:
                    visit.outside += 1
                    if visit.outside >= spec.min_frames:
                        del self.members[tid]
                        box = _box(objs, k)
                        out.append(
                            AnalyticsEvent(
                                "leave", spec.name, tid, visit.label, objs.class_ids[k], box, "", t - visit.since
                            )
                        )
                        self.counts.add(t, visit.label, False)
                        changed = True
        if spec.dwell_s is not None:
            for tid, visit in self.members.items():
                if not visit.dwelt and t - visit.since >= spec.dwell_s:
                    visit.dwelt = True
                    k = _index(objs, tid)
                    box = _box(objs, k) if k is not None else (0.0, 0.0, 0.0, 0.0)
                    cls = objs.class_ids[k] if k is not None else -1
                    out.append(AnalyticsEvent("dwell", spec.name, tid, visit.label, cls, box, "", t - visit.since))
        return changed

    def _slots_of(self, ids: np.ndarray) -> np.ndarray:
        slots = self.slots
        found = [slots.get(i, -1) for i in ids.tolist()]
        if -1 in found:
            for j, i in enumerate(ids.tolist()):
                if found[j] < 0:
                    found[j] = slots[i] = self.free.pop() if self.free else len(slots)
            if len(slots) > len(self.side):
                grow = max(len(slots), 2 * len(self.side))
                self.side = np.concatenate([self.side, np.zeros(grow - len(self.side), np.int64)])
                self.where = np.concatenate([self.where, np.zeros((grow - len(self.where), 2))])
        return np.array(found, np.int64)

    def _line(self, objs: Tracked, sel: np.ndarray, t: float, out: list[AnalyticsEvent]) -> bool:
        if not len(sel):
            return False
        a, b = self.pts[0], self.pts[1]
        pts = objs.anchors(self.spec.anchor)[sel]
        dist = signed_distance(pts, a, b)
        margin = self.spec.margin_px
        now = np.where(dist > margin, 1, np.where(dist < -margin, -1, 0))
        firm = now != 0
        if not firm.any():
            return False
        sel, pts, now = sel[firm], pts[firm], now[firm]
        slots = self._slots_of(objs.ids[sel])
        before = self.side[slots]
        flip = (before != 0) & (before != now)
        p0 = self.where[slots[flip]]
        self.side[slots] = now
        self.where[slots] = pts
        if not flip.any():
            return False
        hit = crossing_inside_segment(p0, pts[flip], a, b)
        changed = False
        for k, side in zip(sel[flip][hit].tolist(), now[flip][hit].tolist(), strict=True):
            direction = "in" if side > 0 else "out"
            tid = int(objs.ids[k])
            out.append(
                AnalyticsEvent(
                    "cross", self.spec.name, tid, objs.labels[k], objs.class_ids[k], _box(objs, k), direction
                )
            )
            self.counts.add(t, objs.labels[k], side > 0)
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


def _box(objs: Tracked, k: int) -> tuple[float, float, float, float]:
    b = objs.boxes[k]
    return (float(b[0]), float(b[1]), float(b[2]), float(b[3]))


def _index(objs: Tracked, tid: int) -> int | None:
    hits = np.flatnonzero(objs.ids == tid)
    return int(hits[0]) if len(hits) else None


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
            for s in self.specs:
                if s.streams is not None and stream not in s.streams:
                    continue
                r = _Region(s, width, height, self.window_s)
                if s.name in old:  # a new frame size: keep the counts, forget positions
                    r.counts = old[s.name].counts
                regions.append(r)
            self._streams[stream] = regions
            self._snapshots.pop(stream, None)
        return regions

    def update(
        self, stream: str, t: float, width: int, height: int, objs: Tracked, ended: Sequence[Ended]
    ) -> tuple[list[AnalyticsEvent], tuple[RegionCounts, ...]]:
        """One frame of ``stream`` at time ``t`` (seconds): its events, and every region's counts."""
        events: list[AnalyticsEvent] = []
        regions = self.regions(stream, width, height)
        changed = False
        for r in regions:
            changed |= r.update(objs, ended, t, events)
        snap = self._snapshots.get(stream)
        if snap is None or changed:
            snap = self._snapshots[stream] = tuple(r.counts_now() for r in regions)
        self.events += len(events)
        return events, snap

    def drop_stream(self, stream: str) -> None:
        self._streams.pop(stream, None)
        self._snapshots.pop(stream, None)
