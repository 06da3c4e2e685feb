"""What goes between a pipeline and its analytics process: a batch of results as columns one way, what
the stages added to them the other way (``_remote``, ``_worker``).

Columns, not records, both ways: the pipeline's side of a call must cost far less than running the
stages (a few microseconds a frame at 64 streams), so a batch is a dozen lists and arrays, and the reply
is the track columns of every detection plus, per frame, only what is new (ended tracks, events, a
stream's region counts when they changed since the last reply). The arrays travel as their bytes, their
types fixed here (pickling an array makes its type again on the way in, several calls each), and the
track columns of an answer go into the results' own detections where nobody else has seen them yet.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._decoders import BatchColumns
from .._detections import Detections, retrack_in_place, retracked, unchecked
from .._results import AnalyticsEvent, EndedTrack, RegionCounts, Result, add_analytics, new_result, with_analytics

__all__ = ["WireBatch", "WireReply", "apply_reply", "decode_batch", "encode_batch", "encode_reply"]


@dataclass
class WireBatch:
    """A batch of results, the fields the built-in stages read, as columns."""

    streams: list[str]
    sequences: list[int]
    timestamps: list[float]
    models: list[str]
    versions: list[str]
    widths: list[int]
    heights: list[int]
    offsets: list[int]  # frame i's detections are rows offsets[i]:offsets[i + 1]
    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    label_index: np.ndarray
    tables: list[tuple[str, ...]]  # the label tables, and per frame which one
    table_of: list[int]
    track: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # every row's, when an earlier stage tracked
    tracked: list[bool]
    ended: dict[int, tuple[EndedTrack, ...]]  # frames with ended tracks already (an earlier stage)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _batch_off_wire, (
            self.streams, self.sequences, self.timestamps, self.models, self.versions, self.widths, self.heights,
            self.offsets, _bytes(self.boxes, np.float32), _bytes(self.scores, np.float32),
            _bytes(self.class_ids, np.int64), _bytes(self.label_index, np.int64), self.tables, self.table_of,
            _track_bytes(self.track), self.tracked, self.ended,
        )  # fmt: skip


def _batch_off_wire(*f: Any) -> WireBatch:  # the fields in WireBatch's order, as __reduce__ gives them
    return WireBatch(
        f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7],
        np.frombuffer(f[8], np.float32).reshape(-1, 4),
        np.frombuffer(f[9], np.float32),
        np.frombuffer(f[10], np.int64),
        np.frombuffer(f[11], np.int64),
        f[12], f[13], _track_off_wire(f[14]), f[15], f[16],
    )  # fmt: skip


def _bytes(a: np.ndarray, dtype: Any) -> bytes:
    return a.astype(dtype, copy=False).tobytes()


def _track_bytes(track: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> tuple[bytes, bytes, bytes] | None:
    if track is None:
        return None
    return _bytes(track[0], np.int64), _bytes(track[1], np.int64), _bytes(track[2], np.int8)


def _track_off_wire(raw: tuple[bytes, bytes, bytes] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    if raw is None:
        return None
    return np.frombuffer(raw[0], np.int64), np.frombuffer(raw[1], np.int64), np.frombuffer(raw[2], np.int8)


@dataclass
class WireReply:
    """What the stages added: every row's track columns (when any frame was tracked; ``tracked`` per
    frame), and by frame index the ended tracks, events and region counts that are new."""

    track: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    tracked: list[bool]
    ended: dict[int, tuple[EndedTrack, ...]]
    events: dict[int, tuple[AnalyticsEvent, ...]]
    regions: dict[int, tuple[RegionCounts, ...]]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _reply_off_wire, (_track_bytes(self.track), self.tracked, self.ended, self.events, self.regions)


def _reply_off_wire(track: tuple[bytes, bytes, bytes] | None, *rest: Any) -> WireReply:
    return WireReply(_track_off_wire(track), *rest)


def encode_batch(results: Sequence[Result], columns: BatchColumns | None = None) -> WireBatch:
    """The pipeline's side: results → columns. ``columns``: the decoder's, when ``results`` are its
    results of one batch as it made them (no stage ran on them): sent as they are, not joined again."""
    if columns is None:
        rows = _joined(results)
    else:
        n, c = len(results), columns
        as_int = c.classes.astype(np.int64, copy=False), c.index.astype(np.int64, copy=False)
        rows = (c.starts, c.boxes, c.scores.astype(np.float32, copy=False), *as_int, [c.labels], [0] * n, None)
        rows += ([False] * n, {})
    return WireBatch(
        [r.stream_id for r in results],
        [r.sequence for r in results],
        [r.timestamp for r in results],
        [r.model for r in results],
        [r.model_version for r in results],
        [r.frame_width for r in results],
        [r.frame_height for r in results],
        *rows,
    )


def _joined(results: Sequence[Result]) -> tuple[Any, ...]:
    """The detection fields of a :class:`WireBatch` (``offsets`` on), joined from the frames'."""
    dets = [Detections.from_records(r.detections) for r in results]
    offsets = [0, *itertools.accumulate(len(d) for d in dets)]
    tables: list[tuple[str, ...]] = []
    where: dict[int, int] = {}
    table_of = []
    for d in dets:
        t = where.get(id(d.label_table))
        if t is None:
            t = where[id(d.label_table)] = len(tables)
            tables.append(d.label_table)
        table_of.append(t)
    full = [d for d in dets if len(d)]
    tracked = [d.tracked for d in dets]
    track = None
    if any(tracked):
        track = (
            _cat([d.track_ids for d in full], np.int64),
            _cat([d.track_ages for d in full], np.int64),
            _cat([d.track_states for d in full], np.int8),
        )
    return (
        offsets,
        _cat([d.boxes for d in full], np.float32, (0, 4)),
        _cat([d.scores for d in full], np.float32),
        _cat([d.class_ids for d in full], np.int64),
        _cat([d.label_index for d in full], np.int64),
        tables,
        table_of,
        track,
        tracked,
        {i: r.ended_tracks for i, r in enumerate(results) if r.ended_tracks},
    )


def _cat(parts: list[np.ndarray], dtype: Any, empty: tuple[int, ...] = (0,)) -> np.ndarray:
    if not parts:
        return np.zeros(empty, dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


def decode_batch(b: WireBatch) -> list[Result]:
    """The analytics process's side: columns → results (with the fields the built-in stages read)."""
    out = []
    for i, (lo, hi) in enumerate(itertools.pairwise(b.offsets)):
        track = None
        if b.track is not None and b.tracked[i]:
            track = (b.track[0][lo:hi], b.track[1][lo:hi], b.track[2][lo:hi])
        dets = unchecked(
            b.boxes[lo:hi], b.scores[lo:hi], b.class_ids[lo:hi], b.tables[b.table_of[i]], b.label_index[lo:hi], track
        )
        out.append(
            new_result(
                b.streams[i],
                b.sequences[i],
                b.timestamps[i],
                b.models[i],
                b.versions[i],
                b.widths[i],
                b.heights[i],
                0.0,
                dets,
                ended_tracks=b.ended.get(i, ()),
            )
        )
    return out


def encode_reply(given: Sequence[Result], results: Sequence[Result], sent: dict[str, object]) -> WireReply:
    """The analytics process's side: what the stages added to ``given`` (the decoded batch), as columns.
    ``sent`` keeps, per stream, the region counts last sent (a stream's counts go again only when they
    change)."""
    tracked = []
    ids, ages, states = [], [], []
    ended: dict[int, tuple[EndedTrack, ...]] = {}
    events: dict[int, tuple[AnalyticsEvent, ...]] = {}
    regions: dict[int, tuple[RegionCounts, ...]] = {}
    for i, (before, r) in enumerate(zip(given, results, strict=True)):
        cols = Detections.from_records(r.detections)
        if len(cols) != len(before.detections):
            raise ValueError(f"a stage changed the number of detections of frame {i}")
        tracked.append(cols.tracked)
        if len(cols):
            ids.append(cols.track_ids)
            ages.append(cols.track_ages)
            states.append(cols.track_states)
        n_ended = len(before.ended_tracks)
        if len(r.ended_tracks) > n_ended:
            ended[i] = r.ended_tracks[n_ended:]
        if r.events:
            events[i] = r.events
        if r.regions and sent.get(r.stream_id) is not r.regions:
            sent[r.stream_id] = r.regions
            regions[i] = r.regions
    track = None
    if any(tracked):
        track = (_cat(ids, np.int64), _cat(ages, np.int64), _cat(states, np.int8))
    return WireReply(track, tracked, ended, events, regions)


def apply_reply(
    results: Sequence[Result],
    reply: WireReply,
    offsets: Sequence[int],
    last: dict[str, Any],
    *,
    in_place: bool = False,
    own_detections: bool = False,
) -> list[Result]:
    """The pipeline's side: ``results`` with what the stages added. ``last`` keeps, per stream, the region
    counts last received (a frame without new ones carries those). ``in_place``: the results are the
    caller's alone (made by it, seen by no one): the additions go into them instead of into copies;
    ``own_detections`` too: each result's :class:`Detections` is its own (a built-in decoder's, one per
    frame), and takes its track columns itself."""
    out = []
    track = reply.track
    ids, ages, states = track if track is not None else (None, None, None)
    tracked = reply.tracked
    for i, r in enumerate(results):
        dets = None
        if ids is not None and tracked[i]:
            lo, hi = offsets[i], offsets[i + 1]
            d = r.detections
            if own_detections and type(d) is Detections:  # the result's own, seen by nobody: given its tracks
                retrack_in_place(d, ids[lo:hi], ages[lo:hi], states[lo:hi])  # type: ignore[index]
            else:
                dets = retracked(Detections.from_records(d), ids[lo:hi], ages[lo:hi], states[lo:hi])  # type: ignore[index]
        regions = reply.regions.get(i)
        if regions is not None:
            last[r.stream_id] = regions
        else:
            regions = last.get(r.stream_id, ())
        ended = reply.ended.get(i, ())
        events = reply.events.get(i, ())
        if dets is None and not ended and not events and not regions:
            out.append(r)  # nothing added, or only its detections' tracks, in place
            continue
        if in_place:  # positional: this runs for every frame
            out.append(add_analytics(r, dets, ended, events, regions))
        else:
            out.append(with_analytics(r, detections=dets, ended_tracks=ended, events=events, regions=regions))
    return out
