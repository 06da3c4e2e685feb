"""ByteTrack for every stream of a pipeline at once.

The association is ByteTrack's (Zhang et al., 2022): detections split on their score; the confident ones
are matched first to every track (tracked or recently lost) on IoU fused with the score, the weak ones
then to the tracks still unmatched (recovering occluded objects without starting tracks on noise), and
what is left of the confident ones to last frame's candidates; a candidate needs ``min_hits`` matches to
get an id; a lost track is kept ``max_lost_frames`` frames. Matches never cross classes (each track keeps
its label) or streams.

Tracks of all streams live in one table of arrays, so each step — Kalman prediction, pair costs, the
matching (``_assign.match``), the Kalman update — is a few numpy calls for the whole batch, whatever the
number of streams. A batch holding several frames of one stream is processed in rounds (the n-th frame of
every stream in round n), so each stream still sees its frames in order.

Time is counted in frames from the source's sequence numbers: a live source that drops frames leaves a
gap in them, and the motion model predicts across the gap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ._assign import group_pairs, iou_dense, iou_pairs, match
from ._kalman import KalmanBoxes, xyxy_to_xyah

__all__ = ["ByteTracker", "FrameDetections", "FrameTracks", "TrackEnd", "TrackerParams"]

TENTATIVE, TRACKED, LOST = 0, 1, 2
#: a track whose current estimate overlaps a tracked one of its class this much is a duplicate
_DUPLICATE_IOU = 0.85
_INT_FIELDS = ("stream", "cls", "tid", "state", "hits", "first_seq", "last_seq", "pred_seq")


@dataclass(frozen=True)
class TrackerParams:
    """ByteTrack's parameters (defaults: the paper's). Scores are the detector's."""

    high_threshold: float = 0.5
    low_threshold: float = 0.1
    new_track_threshold: float = 0.6
    match_threshold: float = 0.8  # highest cost 1 - IoU·score in the first association
    low_match_threshold: float = 0.5  # highest cost 1 - IoU for the low-score detections
    tentative_match_threshold: float = 0.7  # highest cost 1 - IoU·score for candidates
    max_lost_frames: int = 30
    min_hits: int = 2
    fuse_score: bool = True


@dataclass
class FrameDetections:
    """One frame's detections as arrays: ``boxes`` (N, 4) x1, y1, x2, y2, ``scores`` (N,), ``classes`` (N,)
    small non-negative integers (the caller's class numbering, stable across model versions)."""

    stream: str
    sequence: int
    timestamp: float
    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray


@dataclass(frozen=True)
class TrackEnd:
    """A track that ended (only tracks that had an id)."""

    stream: str
    track_id: int
    cls: int
    reason: str
    first_sequence: int
    last_sequence: int
    first_seen: float
    last_seen: float
    hits: int
    box: tuple[float, float, float, float]


@dataclass
class FrameTracks:
    """What the tracker says about one frame: per detection (in input order) ``ids`` (0: none), ``ages``
    (frames since the track started), ``states`` (-1 untracked, TENTATIVE, TRACKED, or 3 for a track that
    got its id on this frame); and the tracks that ended on it."""

    ids: np.ndarray
    ages: np.ndarray
    states: np.ndarray
    ended: list[TrackEnd] = field(default_factory=list)


NEW = 3
UNTRACKED = -1


@dataclass
class _Round:
    """The detections of one round, flattened over its frames (one frame per stream)."""

    frames: list[FrameDetections]
    sidx: np.ndarray  # per frame: stream index
    seq_of: np.ndarray  # per stream index: this round's sequence number, -1 when not in the round
    offsets: list[int]  # frame i's detections are [offsets[i], offsets[i + 1])
    frame: np.ndarray  # per detection from here on
    boxes: np.ndarray
    scores: np.ndarray
    cls: np.ndarray
    seq: np.ndarray
    ts: np.ndarray
    group: np.ndarray  # stream index * width + class: pairs are only made within a group
    width: int


@dataclass
class _Active:
    """The tracks of the round's streams: their table rows, predicted boxes, groups, states."""

    rows: np.ndarray
    boxes: np.ndarray
    group: np.ndarray
    state: np.ndarray


class _Table:
    """Struct-of-arrays track table; row order is arbitrary and changes on removal."""

    def __init__(self) -> None:
        for name in _INT_FIELDS:
            setattr(self, name, np.zeros(0, np.int64))
        self.first_ts = np.zeros(0)
        self.last_ts = np.zeros(0)
        self.last_box = np.zeros((0, 4))
        self.kf = KalmanBoxes()

    stream: np.ndarray
    cls: np.ndarray
    tid: np.ndarray
    state: np.ndarray
    hits: np.ndarray
    first_seq: np.ndarray
    last_seq: np.ndarray
    pred_seq: np.ndarray

    def __len__(self) -> int:
        return len(self.tid)

    def take(self, keep: np.ndarray) -> None:
        for name in _INT_FIELDS:
            setattr(self, name, getattr(self, name)[keep])
        self.first_ts, self.last_ts, self.last_box = self.first_ts[keep], self.last_ts[keep], self.last_box[keep]
        self.kf.take(keep)

    def append(
        self, stream: np.ndarray, seq: np.ndarray, ts: np.ndarray, boxes: np.ndarray, classes: np.ndarray
    ) -> None:
        """New candidates (no id yet), one per row of the arguments."""
        n = len(boxes)
        self.stream = np.concatenate([self.stream, stream])
        self.cls = np.concatenate([self.cls, classes])
        self.tid = np.concatenate([self.tid, np.zeros(n, np.int64)])
        self.state = np.concatenate([self.state, np.full(n, TENTATIVE, np.int64)])
        self.hits = np.concatenate([self.hits, np.ones(n, np.int64)])
        for name in ("first_seq", "last_seq", "pred_seq"):
            setattr(self, name, np.concatenate([getattr(self, name), seq]))
        self.first_ts = np.concatenate([self.first_ts, ts])
        self.last_ts = np.concatenate([self.last_ts, ts])
        self.last_box = np.concatenate([self.last_box, boxes])
        self.kf.append(xyxy_to_xyah(boxes))


class ByteTracker:
    """Tracks objects in any number of streams; see the module docstring.

    Example::

        tracker = ByteTracker(TrackerParams())
        out = tracker.update([FrameDetections("cam1", 0, 0.0, boxes, scores, classes)])[0]
        out.ids  # one track id per detection, 0 where none
    """

    def __init__(self, params: TrackerParams) -> None:
        self.params = params
        self._t = _Table()
        self._streams: dict[str, int] = {}
        self._names: list[str] = []
        self._next_id: list[int] = []
        self.started = 0
        self.ended = 0

    # --- queries -----------------------------------------------------------------------------------
    def active(self, stream: str | None = None) -> int:
        """Tracks with an id that have not ended (tracked or lost), in one stream or all."""
        live = self._t.tid > 0
        if stream is not None:
            idx = self._streams.get(stream)
            if idx is None:
                return 0
            live &= self._t.stream == idx
        return int(live.sum())

    # --- updates -----------------------------------------------------------------------------------
    def update(self, frames: Sequence[FrameDetections]) -> list[FrameTracks]:
        """Track a batch of frames (any streams; each stream's frames in order). One output per frame."""
        out: list[FrameTracks | None] = [None] * len(frames)
        rounds: list[list[int]] = []
        seen: dict[str, int] = {}
        for i, f in enumerate(frames):
            n = seen.get(f.stream, 0)
            seen[f.stream] = n + 1
            if n == len(rounds):
                rounds.append([])
            rounds[n].append(i)
        for members in rounds:
            for i, tracks in zip(members, self._round([frames[i] for i in members]), strict=True):
                out[i] = tracks
        return [o for o in out if o is not None]

    def end_classes(self, keep: Iterable[int]) -> dict[str, list[TrackEnd]]:
        """End every track whose class is not in ``keep`` (a model without its label took over): the
        ended tracks by stream. Candidates of those classes are dropped."""
        t = self._t
        gone = ~np.isin(t.cls, np.fromiter(keep, np.int64))
        ended = self._end(gone, "class_gone")
        by_stream: dict[str, list[TrackEnd]] = {}
        for e in ended:
            by_stream.setdefault(e.stream, []).append(e)
        return by_stream

    def drop_stream(self, stream: str) -> None:
        """Forget a stream's tracks (not reported as ended)."""
        idx = self._streams.get(stream)
        if idx is not None:
            self._t.take(self._t.stream != idx)

    # --- internals ---------------------------------------------------------------------------------
    def _stream_index(self, name: str) -> int:
        idx = self._streams.get(name)
        if idx is None:
            idx = self._streams[name] = len(self._names)
            self._names.append(name)
            self._next_id.append(1)
        return idx

    def _round(self, frames: list[FrameDetections]) -> list[FrameTracks]:
        """One frame each of distinct streams."""
        b = self._gather(frames)
        act = self._predict(b)
        det_track, drop = self._associate(b, act)
        fresh = self._commit(b, det_track)
        ids, ages, states = self._outputs(b, det_track, fresh)
        ended = self._expire(b, det_track, drop)
        out = []
        for i, f in enumerate(frames):
            lo, hi = b.offsets[i], b.offsets[i + 1]
            mine = [e for e in ended if e.stream == f.stream]
            out.append(FrameTracks(ids[lo:hi], ages[lo:hi], states[lo:hi], mine))
        return out

    def _gather(self, frames: list[FrameDetections]) -> _Round:
        t = self._t
        sidx = np.array([self._stream_index(f.stream) for f in frames], np.int64)
        seq_of = np.full(len(self._names), -1, np.int64)
        seq_of[sidx] = [f.sequence for f in frames]
        counts = [len(f.boxes) for f in frames]
        frame = np.repeat(np.arange(len(frames)), counts)
        boxes = np.concatenate([np.asarray(f.boxes, np.float64).reshape(-1, 4) for f in frames])
        scores = np.concatenate([np.asarray(f.scores, np.float64).reshape(-1) for f in frames])
        cls = np.concatenate([np.asarray(f.classes, np.int64).reshape(-1) for f in frames])
        width = max(int(cls.max(initial=0)), int(t.cls.max(initial=0))) + 1
        stream = sidx[frame]
        return _Round(
            frames=frames,
            sidx=sidx,
            seq_of=seq_of,
            offsets=np.r_[0, np.cumsum(counts)].tolist(),
            frame=frame,
            boxes=boxes,
            scores=scores,
            cls=cls,
            seq=seq_of[stream],
            ts=np.array([f.timestamp for f in frames])[frame],
            group=stream * width + cls,
            width=width,
        )

    def _predict(self, b: _Round) -> _Active:
        """Predict every track of the round's streams to its frame."""
        t = self._t
        act = np.flatnonzero(b.seq_of[t.stream] >= 0)
        steps = b.seq_of[t.stream[act]] - t.pred_seq[act]
        ahead = steps > 0
        rows = act[ahead]
        if len(rows):
            lost = rows[t.state[rows] == LOST]
            t.kf.vel[lost, 3] = 0.0  # ByteTrack: a lost box stops growing or shrinking
            t.kf.predict(rows, steps[ahead])
            t.pred_seq[rows] = b.seq_of[t.stream[rows]]
        return _Active(act, t.kf.boxes(act), t.stream[act] * b.width + t.cls[act], t.state[act])

    def _associate(self, b: _Round, a: _Active) -> tuple[np.ndarray, np.ndarray]:
        """ByteTrack's three rounds of matching. Returns each detection's track row (-1: none) and the
        candidates left unmatched (to drop); marks the tracked ones left unmatched lost."""
        p = self.params
        det_track = np.full(len(b.boxes), -1, np.int64)
        free = np.ones(len(a.rows), bool)
        high = b.scores >= p.high_threshold
        low = ~high & (b.scores >= p.low_threshold)

        def stage(t_mask: np.ndarray, d_mask: np.ndarray, max_cost: float, fuse: bool) -> None:
            ti = np.flatnonzero(t_mask & free)
            di = np.flatnonzero(d_mask & (det_track < 0))
            if len(ti) == 0 or len(di) == 0:
                return
            scores = b.scores[di] if fuse else None
            mt, md = match(a.boxes[ti], a.group[ti], b.boxes[di], b.group[di], max_cost, scores)
            free[ti[mt]] = False
            det_track[di[md]] = a.rows[ti[mt]]

        # confident detections against tracked and lost tracks; weak ones against the tracked rest
        stage(a.state != TENTATIVE, high, p.match_threshold, p.fuse_score)
        stage(a.state == TRACKED, low, p.low_match_threshold, False)
        self._t.state[a.rows[free & (a.state == TRACKED)]] = LOST
        # the remaining confident detections against last frame's candidates
        stage(a.state == TENTATIVE, high, p.tentative_match_threshold, p.fuse_score)
        return det_track, a.rows[free & (a.state == TENTATIVE)]

    def _commit(self, b: _Round, det_track: np.ndarray) -> np.ndarray:
        """Kalman-update the matched tracks, give ids to candidates with enough hits, start candidates
        from the confident detections nobody took. Returns the rows that got an id on this frame."""
        p = self.params
        t = self._t
        matched = np.flatnonzero(det_track >= 0)
        rows = det_track[matched]
        if len(rows):
            t.kf.update(rows, xyxy_to_xyah(b.boxes[matched]))
            t.hits[rows] += 1
            t.last_seq[rows] = b.seq[matched]
            t.last_ts[rows] = b.ts[matched]
            t.last_box[rows] = b.boxes[matched]
            t.state[rows[t.state[rows] == LOST]] = TRACKED
        confirm = rows[(t.state[rows] == TENTATIVE) & (t.hits[rows] >= p.min_hits)]
        self._give_ids(confirm)
        fresh = np.flatnonzero((det_track < 0) & (b.scores >= max(p.high_threshold, p.new_track_threshold)))
        if len(fresh):
            first = len(t)
            t.append(b.sidx[b.frame[fresh]], b.seq[fresh], b.ts[fresh], b.boxes[fresh], b.cls[fresh])
            det_track[fresh] = np.arange(first, len(t))
            if p.min_hits <= 1:
                born = np.arange(first, len(t))
                self._give_ids(born)
                confirm = np.concatenate([confirm, born])
        return np.asarray(confirm)

    def _outputs(
        self, b: _Round, det_track: np.ndarray, fresh: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = self._t
        n = len(b.boxes)
        ids = np.zeros(n, np.int64)
        ages = np.zeros(n, np.int64)
        states = np.full(n, UNTRACKED, np.int8)
        has = det_track >= 0
        r = det_track[has]
        ids[has] = t.tid[r]
        ages[has] = b.seq[has] - t.first_seq[r]
        states[has] = t.state[r]
        if len(fresh):
            is_new = np.zeros(len(t), bool)
            is_new[fresh] = True
            states[has & is_new[np.maximum(det_track, 0)]] = NEW
        return ids, ages, states

    def _expire(self, b: _Round, det_track: np.ndarray, drop: np.ndarray) -> list[TrackEnd]:
        """Remove unmatched candidates, and lost tracks past ``max_lost_frames`` or duplicating a tracked
        one; returns the tracks that ended."""
        t = self._t
        gone = np.zeros(len(t), bool)
        gone[drop] = True
        lost = np.flatnonzero((b.seq_of[t.stream] >= 0) & (t.state == LOST))
        expired = np.zeros(len(t), bool)
        expired[lost[b.seq_of[t.stream[lost]] - t.last_seq[lost] > self.params.max_lost_frames]] = True
        expired[self._duplicates(b, det_track, lost)] = True
        return self._end(expired, "lost", also=gone)

    def _give_ids(self, rows: np.ndarray) -> None:
        t = self._t
        for r in rows.tolist():
            s = int(t.stream[r])
            t.tid[r] = self._next_id[s]
            self._next_id[s] += 1
            t.state[r] = TRACKED
        self.started += len(rows)

    def _duplicates(self, b: _Round, det_track: np.ndarray, lost: np.ndarray) -> np.ndarray:
        """The lost tracks whose estimate sits on a box tracked on this frame, same stream and class
        (ByteTrack drops them): their rows."""
        t = self._t
        if len(lost) == 0:
            return lost
        on = np.flatnonzero(det_track >= 0)
        on = on[t.state[det_track[on]] == TRACKED]
        lost_group = t.stream[lost] * b.width + t.cls[lost]
        if len(lost) * len(on) <= 8192:
            same = lost_group[:, None] == b.group[on][None, :]
            over = (iou_dense(t.kf.boxes(lost), b.boxes[on]) > _DUPLICATE_IOU) & same
            return np.asarray(lost[over.any(axis=1)])
        li, di = group_pairs(lost_group, b.group[on])
        if len(li) == 0:
            return li
        iou = iou_pairs(t.kf.boxes(lost[li]), b.boxes[on[di]])
        return np.asarray(lost[li[iou > _DUPLICATE_IOU]])

    def _end(self, mask: np.ndarray, reason: str, also: np.ndarray | None = None) -> list[TrackEnd]:
        """Remove the rows in ``mask`` (reported if they had an id) and in ``also`` (silently)."""
        t = self._t
        report = np.flatnonzero(mask & (t.tid > 0))
        ended = [
            TrackEnd(
                self._names[int(t.stream[r])],
                int(t.tid[r]),
                int(t.cls[r]),
                reason,
                int(t.first_seq[r]),
                int(t.last_seq[r]),
                float(t.first_ts[r]),
                float(t.last_ts[r]),
                int(t.hits[r]),
                (float(t.last_box[r, 0]), float(t.last_box[r, 1]), float(t.last_box[r, 2]), float(t.last_box[r, 3])),
            )
            for r in report.tolist()
        ]
        remove = mask if also is None else (mask | also)
        if remove.any():
            t.take(~remove)
        self.ended += len(ended)
        return ended
