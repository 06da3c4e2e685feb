"""Typed result records: what a pipeline yields for every frame."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "AnalyticsEvent",
    "Classification",
    "Detection",
    "EndedTrack",
    "Keypoint",
    "Mask",
    "RegionCounts",
    "Result",
]


def _reduce_fields(self: Any) -> tuple[Any, ...]:
    """Pickled as its fields' values, made again by its class's maker (:data:`_MAKERS`), which fills the
    slots one by one: a fraction of the slots dataclass's own state round trip (records coming back from
    the analytics process, by the hundred in an answer when the counts change on many streams at once)."""
    cls = type(self)
    return (_MAKERS[cls], tuple(getattr(self, f) for f in cls.__dataclass_fields__))


def _setters(cls: type) -> tuple[Any, ...]:
    return tuple(getattr(cls, f).__set__ for f in cls.__dataclass_fields__)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Mask:
    """An instance mask in source-frame pixels, in one of two compact forms (the decoder's
    ``mask_format``):

    - ``polygons``: the mask's outer outlines, each a flat ``(x0, y0, x1, y1, ...)`` tuple;
    - ``rle``: COCO's uncompressed run-length encoding of the whole frame, column-major: ``counts``
      alternate runs of 0s and 1s, starting with 0s, over ``size`` (height, width) pixels.
    """

    polygons: tuple[tuple[float, ...], ...] = ()
    counts: tuple[int, ...] | None = None
    size: tuple[int, int] | None = None

    @property
    def area(self) -> int:
        """Pixels inside the mask (from the RLE; 0 for polygons, whose area is ``cv2.contourArea``'s)."""
        return sum(self.counts[1::2]) if self.counts else 0

    def to_dict(self) -> dict[str, Any]:
        if self.counts is not None and self.size is not None:
            return {"rle": {"size": list(self.size), "counts": list(self.counts)}}
        return {"polygons": [[round(v, 1) for v in poly] for poly in self.polygons]}


@dataclass(frozen=True, slots=True)
class Keypoint:
    """A pose keypoint in source-frame pixels with its visibility score (1.0 when the model has none)."""

    x: float
    y: float
    score: float

    def to_list(self) -> list[float]:
        return [round(self.x, 1), round(self.y, 1), round(self.score, 3)]


@dataclass(frozen=True, slots=True)
class Detection:
    """One object: a box in source-frame pixels (x1, y1, x2, y2), a score and a class; a segmentation
    model adds its ``mask``, a pose model its ``keypoints`` (in the model's keypoint order).

    With a ``track`` analytics stage in the pipeline, ``track_id`` is the object's id within its stream
    (1, 2, ... never reused; None while the object is only a candidate or not tracked), ``track_age`` the
    frames since the track's first detection (0 on that frame) and ``track_state`` one of ``"new"`` (the
    frame the track got its id), ``"tracked"``, ``"tentative"`` (a candidate without an id yet) or ``""``
    (not tracked: no track stage, a class the tracker skips, or a low score that matched no track).
    """

    box: tuple[float, float, float, float]
    score: float
    class_id: int
    label: str
    track_id: int | None = None
    track_age: int = 0
    track_state: str = ""
    mask: Mask | None = None
    keypoints: tuple[Keypoint, ...] = ()

    def with_track(self, track_id: int | None, age: int, state: str) -> Detection:
        """This detection with its track fields set (every other field kept)."""
        # Fills the slots directly: half the time of the frozen dataclass's __init__ (a tracker calls
        # this for every tracked detection of every frame).
        new = object.__new__(Detection)
        box, score, class_id, label, tid, track_age, track_state, mask, keypoints = _DETECTION_SLOTS
        box(new, self.box)
        score(new, self.score)
        class_id(new, self.class_id)
        label(new, self.label)
        tid(new, track_id)
        track_age(new, age)
        track_state(new, state)
        mask(new, self.mask)
        keypoints(new, self.keypoints)
        return new

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "box": [round(v, 2) for v in self.box],
            "score": round(self.score, 4),
            "class_id": self.class_id,
            "label": self.label,
        }
        if self.track_state:
            out["track_state"] = self.track_state
            if self.track_id is not None:
                out["track_id"] = self.track_id
                out["track_age"] = self.track_age
        if self.mask is not None:
            out["mask"] = self.mask.to_dict()
        if self.keypoints:
            out["keypoints"] = [k.to_list() for k in self.keypoints]
        return out


_DETECTION_SLOTS = tuple(
    getattr(Detection, name).__set__
    for name in ("box", "score", "class_id", "label", "track_id", "track_age", "track_state", "mask", "keypoints")
)


@dataclass(frozen=True, slots=True)
class Classification:
    """One class of a top-k classification."""

    class_id: int
    label: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"class_id": self.class_id, "label": self.label, "score": round(self.score, 5)}


@dataclass(frozen=True, slots=True)
class EndedTrack:
    """A track that ended on this frame.

    ``reason``: ``"lost"`` (no detection matched it for ``max_lost_frames``) or ``"class_gone"`` (a hot
    swap to a model without its label). ``first_sequence``/``last_sequence`` and ``first_seen``/``last_seen``
    (capture times, Unix seconds) are those of its first and last matched detection; ``hits`` counts the
    frames it was matched on.
    """

    track_id: int
    label: str
    class_id: int
    reason: str
    first_sequence: int
    last_sequence: int
    first_seen: float
    last_seen: float
    hits: int
    box: tuple[float, float, float, float]

    @property
    def duration_s(self) -> float:
        return max(0.0, self.last_seen - self.first_seen)

    __reduce__ = _reduce_fields

    def to_dict(self) -> dict[str, Any]:
        return {
            "track_id": self.track_id,
            "label": self.label,
            "class_id": self.class_id,
            "reason": self.reason,
            "first_seq": self.first_sequence,
            "last_seq": self.last_sequence,
            "duration_s": round(self.duration_s, 3),
            "hits": self.hits,
        }


@dataclass(frozen=True, slots=True)
class AnalyticsEvent:
    """Something a tracked object did on this frame, in a zone or at a line.

    ``kind``: ``"enter"`` / ``"leave"`` (a zone; ``dwell_s`` on leave is the time it spent inside),
    ``"dwell"`` (it has been inside a zone for the zone's ``dwell_s``, once per visit) or ``"cross"`` (a
    line, ``direction`` ``"in"`` or ``"out"``). ``region`` names the zone or line.
    """

    kind: str
    region: str
    track_id: int
    label: str
    class_id: int
    box: tuple[float, float, float, float]
    direction: str = ""
    dwell_s: float = 0.0

    __reduce__ = _reduce_fields

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "region": self.region,
            "track_id": self.track_id,
            "label": self.label,
        }
        if self.direction:
            out["direction"] = self.direction
        if self.kind in ("leave", "dwell"):
            out["dwell_s"] = round(self.dwell_s, 3)
        return out


@dataclass(frozen=True, slots=True)
class RegionCounts:
    """A zone's or a line's counts on one stream as of this frame, by class label.

    ``kind`` is ``"zone"`` or ``"line"``; ``points`` its shape in source pixels. Zones: ``inside`` holds the
    tracked objects inside now, ``in_total``/``out_total`` the entries and exits since the stream started.
    Lines: ``in_total``/``out_total`` the crossings in each direction. ``in_window``/``out_window`` count
    the same over the last ``window_s`` seconds.
    """

    name: str
    kind: str
    points: tuple[tuple[float, float], ...]
    inside: Mapping[str, int]
    in_total: Mapping[str, int]
    out_total: Mapping[str, int]
    in_window: Mapping[str, int]
    out_window: Mapping[str, int]
    window_s: float

    __reduce__ = _reduce_fields

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == "zone":
            out["inside"] = dict(self.inside)
        out["in"] = dict(self.in_total)
        out["out"] = dict(self.out_total)
        return out


# The makers: each slot set in turn, no loop (an answer with records unpickled in 1.76x less time than
# with a loop over the setters: docs/gpu.md, "Twentieth session").
_ENDED, _EVENT, _REGION = _setters(EndedTrack), _setters(AnalyticsEvent), _setters(RegionCounts)


def _ended_track(
    track_id: int, label: str, class_id: int, reason: str, first_sequence: int, last_sequence: int,
    first_seen: float, last_seen: float, hits: int, box: tuple[float, float, float, float], _s: Any = _ENDED,
) -> EndedTrack:  # fmt: skip
    new = object.__new__(EndedTrack)
    _s[0](new, track_id)
    _s[1](new, label)
    _s[2](new, class_id)
    _s[3](new, reason)
    _s[4](new, first_sequence)
    _s[5](new, last_sequence)
    _s[6](new, first_seen)
    _s[7](new, last_seen)
    _s[8](new, hits)
    _s[9](new, box)
    return new


def _analytics_event(
    kind: str, region: str, track_id: int, label: str, class_id: int, box: tuple[float, float, float, float],
    direction: str, dwell_s: float, _s: Any = _EVENT,
) -> AnalyticsEvent:  # fmt: skip
    new = object.__new__(AnalyticsEvent)
    _s[0](new, kind)
    _s[1](new, region)
    _s[2](new, track_id)
    _s[3](new, label)
    _s[4](new, class_id)
    _s[5](new, box)
    _s[6](new, direction)
    _s[7](new, dwell_s)
    return new


def _region_counts(
    name: str, kind: str, points: tuple[tuple[float, float], ...], inside: Mapping[str, int],
    in_total: Mapping[str, int], out_total: Mapping[str, int], in_window: Mapping[str, int],
    out_window: Mapping[str, int], window_s: float, _s: Any = _REGION,
) -> RegionCounts:  # fmt: skip
    new = object.__new__(RegionCounts)
    _s[0](new, name)
    _s[1](new, kind)
    _s[2](new, points)
    _s[3](new, inside)
    _s[4](new, in_total)
    _s[5](new, out_total)
    _s[6](new, in_window)
    _s[7](new, out_window)
    _s[8](new, window_s)
    return new


_MAKERS: dict[type, Any] = {EndedTrack: _ended_track, AnalyticsEvent: _analytics_event, RegionCounts: _region_counts}


@dataclass(frozen=True, slots=True)
class Result:
    """Everything the pipeline produced for one frame.

    ``model`` and ``model_version`` name the exact model version that processed the frame (they change
    at a hot swap). ``timestamp`` is the capture time in seconds since the epoch; ``latency_ms`` is the
    time from capture to this result. Analytics stages fill ``ended_tracks`` (tracks that ended on this
    frame), ``events`` (zone and line events of this frame) and ``regions`` (every zone's and line's
    counts on this stream as of this frame). ``source`` names what the frame was read from, credentials
    redacted: the image file for a folder, the file or camera URI otherwise. ``detections`` reads like a
    tuple of :class:`Detection`; from the built-in decoders it is a
    :class:`~edgefleet.sdk.Detections`, whose arrays (``boxes``, ``scores``, ``class_ids``, ``track_ids``,
    ...) are there without making a record per object.
    """

    stream_id: str
    sequence: int
    timestamp: float
    model: str
    model_version: str
    frame_width: int
    frame_height: int
    latency_ms: float
    detections: Sequence[Detection] = ()
    classifications: tuple[Classification, ...] = ()
    raw: dict[str, np.ndarray] | None = field(default=None, compare=False)
    ended_tracks: tuple[EndedTrack, ...] = ()
    events: tuple[AnalyticsEvent, ...] = ()
    regions: tuple[RegionCounts, ...] = ()
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the JSONL sink writes exactly this)."""
        out: dict[str, Any] = {
            "stream": self.stream_id,
            "seq": self.sequence,
            "ts": round(self.timestamp, 6),
            "model": self.model,
            "version": self.model_version,
            "width": self.frame_width,
            "height": self.frame_height,
            "latency_ms": round(self.latency_ms, 3),
        }
        if self.source:
            out["source"] = self.source
        if self.detections:
            out["detections"] = [d.to_dict() for d in self.detections]
        if self.classifications:
            out["classifications"] = [c.to_dict() for c in self.classifications]
        if self.ended_tracks:
            out["ended_tracks"] = [t.to_dict() for t in self.ended_tracks]
        if self.events:
            out["events"] = [e.to_dict() for e in self.events]
        if self.regions:
            out["regions"] = [r.to_dict() for r in self.regions]
        return out


def with_analytics(
    r: Result,
    *,
    detections: Sequence[Detection] | None = None,
    ended_tracks: tuple[EndedTrack, ...] = (),
    events: tuple[AnalyticsEvent, ...] = (),
    regions: tuple[RegionCounts, ...] = (),
) -> Result:
    """``r`` with its detections replaced (when given) and the rest appended to its own: what
    ``dataclasses.replace`` does, in a tenth of its time (analytics stages call it for every frame)."""
    return new_result(
        r.stream_id,
        r.sequence,
        r.timestamp,
        r.model,
        r.model_version,
        r.frame_width,
        r.frame_height,
        r.latency_ms,
        r.detections if detections is None else detections,
        r.classifications,
        r.raw,
        r.ended_tracks + ended_tracks if ended_tracks else r.ended_tracks,
        r.events + events if events else r.events,
        r.regions + regions if regions else r.regions,
        r.source,
    )


def add_analytics(
    r: Result,
    detections: Sequence[Detection] | None = None,
    ended_tracks: tuple[EndedTrack, ...] = (),
    events: tuple[AnalyticsEvent, ...] = (),
    regions: tuple[RegionCounts, ...] = (),
) -> Result:
    """:func:`with_analytics` into ``r`` itself, for a result nobody but its maker has seen yet (frozen for
    everyone it is delivered to, it is filled before that, as its constructor would): no copy."""
    s = _RESULT_SLOTS
    if detections is not None:
        s[8](r, detections)
    if ended_tracks:
        s[11](r, r.ended_tracks + ended_tracks)
    if events:
        s[12](r, r.events + events)
    if regions:
        s[13](r, r.regions + regions)
    return r


def new_result(
    stream_id: str,
    sequence: int,
    timestamp: float,
    model: str,
    model_version: str,
    frame_width: int,
    frame_height: int,
    latency_ms: float,
    detections: Sequence[Detection] = (),
    classifications: tuple[Classification, ...] = (),
    raw: dict[str, np.ndarray] | None = None,
    ended_tracks: tuple[EndedTrack, ...] = (),
    events: tuple[AnalyticsEvent, ...] = (),
    regions: tuple[RegionCounts, ...] = (),
    source: str = "",
) -> Result:
    """``Result(...)`` without the frozen dataclass's ``__init__`` (a setattr call per field): the
    pipeline makes one for every frame, and this costs half (docs/gpu.md, "Seventeenth session")."""
    new = object.__new__(Result)
    s = _RESULT_SLOTS
    s[0](new, stream_id)
    s[1](new, sequence)
    s[2](new, timestamp)
    s[3](new, model)
    s[4](new, model_version)
    s[5](new, frame_width)
    s[6](new, frame_height)
    s[7](new, latency_ms)
    s[8](new, detections)
    s[9](new, classifications)
    s[10](new, raw)
    s[11](new, ended_tracks)
    s[12](new, events)
    s[13](new, regions)
    s[14](new, source)
    return new


_RESULT_SLOTS = tuple(getattr(Result, f).__set__ for f in Result.__dataclass_fields__)
