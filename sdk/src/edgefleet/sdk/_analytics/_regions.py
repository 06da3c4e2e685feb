"""The ``zones`` analytics stage: zones (polygons) and lines over tracked objects, with their events and
windowed counts per class. It needs a ``track`` stage before it: only detections with a track id count."""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Mapping
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from .._detections import Detections
from .._results import Result, with_analytics
from ._base import AnalyticsConfig, AnalyticsStage
from ._zones import BatchObjects, Ended, FrameRef, RegionEngine, RegionSpec

__all__ = ["Line", "Zone", "ZonesConfig", "ZonesStage"]

_log = logging.getLogger(__name__)
_UNTRACKED_WARN = 30

RegionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$")]
Point = tuple[float, float]


class _Region(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: RegionName = Field(description="unique among the stage's zones and lines; letters, digits, space . _ -")
    normalized: bool = Field(False, description="points are fractions of the frame's width and height (0..1)")
    streams: tuple[str, ...] | None = Field(None, description="streams it applies to (None: every stream)")
    classes: tuple[str, ...] | None = Field(None, description="labels it counts (None: every tracked label)")
    anchor: Literal["bottom_center", "center"] = Field(
        "bottom_center", description="the box point that counts: where an object stands, or its centre"
    )

    def _check_points(self, points: tuple[Point, ...]) -> None:
        if self.normalized and any(not (0.0 <= v <= 1.0) for p in points for v in p):
            raise ValueError("normalized points must lie in 0..1")


class Zone(_Region):
    """A polygon; objects inside it are counted, their entering and leaving are events.

    Example: ``Zone(name="door", points=[(0.1, 0.5), (0.4, 0.5), (0.4, 0.9), (0.1, 0.9)], normalized=True,
    dwell_s=30)``.
    """

    points: tuple[Point, ...] = Field(min_length=3, max_length=256, description="the polygon's corners, in order")
    dwell_s: float | None = Field(None, gt=0, description="a 'dwell' event once per visit after this long inside")
    min_frames: int = Field(1, ge=1, le=1000, description="frames inside (outside) before an object enters (leaves)")

    @model_validator(mode="after")
    def _valid(self) -> Zone:
        self._check_points(self.points)
        pts = np.array(self.points)
        area = 0.5 * abs(float(np.dot(pts[:, 0], np.roll(pts[:, 1], -1)) - np.dot(pts[:, 1], np.roll(pts[:, 0], -1))))
        if area <= 0.0:
            raise ValueError("the zone's points enclose no area")
        return self


class Line(_Region):
    """A segment; objects crossing it are counted per direction. ``in`` is a crossing to the right-hand
    side of the line walked from its first point to its second, as seen on the image (for a line drawn
    left to right: moving down the picture; drawn top to bottom: moving left).

    Example: ``Line(name="gate", points=[(384, 150), (384, 350)])``.
    """

    points: tuple[Point, Point] = Field(description="the two end points")
    margin_px: float = Field(
        2.0, ge=0, le=10_000, description="source pixels from the line within which an object's side is undecided"
    )

    @model_validator(mode="after")
    def _valid(self) -> Line:
        self._check_points(self.points)
        (x1, y1), (x2, y2) = self.points
        if math.hypot(x2 - x1, y2 - y1) == 0.0:
            raise ValueError("the line's two points are the same")
        return self


class ZonesConfig(AnalyticsConfig):
    """Zones and lines. Example (pipeline YAML)::

    analytics:
      - {type: track}
      - type: zones
        window_s: 60
        zones: [{name: lobby, points: [[0, 300], [768, 300], [768, 576], [0, 576]], dwell_s: 10}]
        lines: [{name: gate, points: [[384, 150], [384, 350]], classes: [person]}]
    """

    type: Literal["zones"] = "zones"
    zones: tuple[Zone, ...] = Field((), max_length=256)
    lines: tuple[Line, ...] = Field((), max_length=256)
    window_s: float = Field(60.0, gt=0, le=7 * 86400, description="window of the recent counts, seconds")

    @field_validator("zones", "lines", mode="before")
    @classmethod
    def _none_is_empty(cls, v: object) -> object:
        return () if v is None else v

    @model_validator(mode="after")
    def _names(self) -> ZonesConfig:
        if not self.zones and not self.lines:
            raise ValueError("give at least one zone or line")
        names = [r.name for r in (*self.zones, *self.lines)]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"zone and line names must be unique: {', '.join(dup)}")
        return self

    def specs(self) -> list[RegionSpec]:
        out = []
        for z in self.zones:
            out.append(_spec(z, "zone", z.points, dwell_s=z.dwell_s, min_frames=z.min_frames))
        for ln in self.lines:
            out.append(_spec(ln, "line", ln.points, margin_px=ln.margin_px))
        return out


def _spec(r: _Region, kind: str, points: tuple[Point, ...], **kw: object) -> RegionSpec:
    return RegionSpec(
        name=r.name,
        kind=kind,
        points=points,
        normalized=r.normalized,
        streams=None if r.streams is None else frozenset(r.streams),
        classes=None if r.classes is None else frozenset(r.classes),
        anchor=r.anchor,
        **kw,  # type: ignore[arg-type]
    )


class ZonesStage(AnalyticsStage):
    """Adds ``events`` and ``regions`` to every result (see :class:`ZonesConfig`)."""

    def __init__(self, config: ZonesConfig) -> None:
        self.config = config
        self.engine = RegionEngine(config.specs(), config.window_s)
        self._untracked = 0  # results with detections but no tracked one, until the first tracked one

    def process(self, results: list[Result]) -> list[Result]:
        dets = [Detections.from_records(r.detections) for r in results]
        if self._untracked >= 0:
            for d in dets:
                if len(d):
                    self._check_tracking(d)
                    if self._untracked < 0:
                        break
        # the batch's tracked objects (a track id > 0) as one set of columns, frame after frame
        counts = [0] * len(dets)
        parts = []
        for i, d in enumerate(dets):
            if d.tracked and len(d):
                counts[i] = len(d)
                parts.append(d)
        offsets = [0, *itertools.accumulate(counts)]
        if parts:
            tids = np.concatenate([d.track_ids for d in parts])
            keep = tids > 0
            kept = np.concatenate(([0], np.cumsum(keep)))
            offsets = kept[offsets].tolist()  # per frame, its kept objects' end in the kept columns
            ids = tids[keep].tolist()
            class_ids = np.concatenate([d.class_ids for d in parts])[keep].tolist()
            label_index = np.concatenate([d.label_index for d in parts])[keep]
            tables = {id(d.label_table): d.label_table for d in parts}
            if len(tables) == 1:
                (table,) = tables.values()
                labels = [table[i] for i in label_index.tolist()]
            else:  # frames of two models in one batch (a swap): each row by its own frame's table
                table_of = np.repeat(np.arange(len(parts)), [len(d) for d in parts])[keep].tolist()
                labels = [parts[f].label_table[i] for f, i in zip(table_of, label_index.tolist(), strict=True)]
            all_boxes = np.concatenate([d.boxes for d in parts])[keep].astype(np.float64, copy=False)
        else:
            ids, class_ids, labels, all_boxes = [], [], [], np.zeros((0, 4))
        frames = [
            FrameRef(
                r.stream_id,
                r.timestamp,
                r.frame_width,
                r.frame_height,
                [Ended(e.track_id, e.label, e.class_id, e.box, e.last_seen) for e in r.ended_tracks]
                if r.ended_tracks
                else (),
            )
            for r in results
        ]
        found = self.engine.update(frames, BatchObjects(ids, labels, class_ids, all_boxes, offsets))
        return [
            with_analytics(r, events=tuple(events), regions=regions)
            for r, (events, regions) in zip(results, found, strict=True)
        ]

    def _check_tracking(self, d: Detections) -> None:
        """Zones count tracked objects: say so once when the detections keep coming without track ids."""
        if d.tracked and bool((d.track_states >= 0).any()):
            self._untracked = -1
            return
        self._untracked += 1
        if self._untracked == _UNTRACKED_WARN:
            _log.warning(
                "analytics (zones): %d frames with detections and none tracked: zones and lines count only "
                "tracked objects; put a {type: track} stage before zones",
                _UNTRACKED_WARN,
            )
            self._untracked = -1

    def on_stream_removed(self, stream_id: str) -> None:
        self.engine.drop_stream(stream_id)

    def stats(self) -> Mapping[str, float | int]:
        return {"events": self.engine.events}
