"""The ``track`` analytics stage: ByteTrack over every stream, track ids that survive a hot swap."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .._detections import Detections
from .._errors import ConfigError
from .._results import EndedTrack, Result, with_analytics
from ._assign import solver
from ._base import AnalyticsConfig, AnalyticsContext, AnalyticsStage, ModelChange
from ._bytetrack import ByteTracker, FrameDetections, TrackEnd, TrackerParams

__all__ = ["TrackConfig", "TrackStage"]

_log = logging.getLogger(__name__)


class TrackConfig(AnalyticsConfig):
    """Multi-object tracking (ByteTrack). Example (pipeline YAML)::

    analytics:
      - {type: track, classes: [person, car], max_lost_frames: 30}

    Detection scores split into confident (``>= high_threshold``) and weak (``>= low_threshold``): lower
    the pipeline's ``score_threshold`` to ``low_threshold`` so the weak ones reach the tracker.
    """

    type: Literal["track"] = "track"
    classes: tuple[str, ...] | None = Field(None, description="labels to track (None: every label)")
    high_threshold: float = Field(0.5, gt=0, le=1, description="score of a confident detection")
    low_threshold: float = Field(0.1, ge=0, le=1, description="lowest score used at all (second association)")
    new_track_threshold: float = Field(0.6, gt=0, le=1, description="lowest score that starts a track")
    match_threshold: float = Field(0.8, gt=0, lt=1, description="highest cost 1 - IoU·score of a first-round match")
    max_lost_frames: int = Field(30, ge=0, le=100_000, description="frames a lost track waits to be found again")
    min_hits: int = Field(2, ge=1, le=1000, description="matched frames before a candidate gets an id")
    fuse_score: bool = Field(True, description="weigh IoU by the detection score in the confident rounds")

    @model_validator(mode="after")
    def _order(self) -> TrackConfig:
        if self.low_threshold > self.high_threshold:
            raise ValueError(f"low_threshold {self.low_threshold} is above high_threshold {self.high_threshold}")
        return self

    def params(self) -> TrackerParams:
        return TrackerParams(
            high_threshold=self.high_threshold,
            low_threshold=self.low_threshold,
            new_track_threshold=self.new_track_threshold,
            match_threshold=self.match_threshold,
            max_lost_frames=self.max_lost_frames,
            min_hits=self.min_hits,
            fuse_score=self.fuse_score,
        )


class TrackStage(AnalyticsStage):
    """Adds ``track_id``/``track_age``/``track_state`` to each detection and ``ended_tracks`` to results.

    Classes are matched by label, not by class number, so a hot swap to a model with another class list
    keeps every track whose label the new model still has (its detections then carry the new model's
    class numbers). Tracks of labels the new model lacks end at the cut-over (reason ``class_gone``);
    when the new model has none of the old labels, every track ends there and new ones start with new ids
    (ids are never reused within a stream).
    """

    def __init__(self, config: TrackConfig) -> None:
        try:
            solver()
        except ImportError as exc:
            raise ConfigError(f"analytics (track): {exc}") from None
        self.config = config
        self.tracker = ByteTracker(config.params())
        self._classes: dict[str, int] = {}
        self._names: list[str] = []
        self._class_ids: dict[int, int] = {}  # tracker class -> the serving model's class number
        self._pending: dict[str, list[TrackEnd]] = {}
        self._change: ModelChange | None = None
        self._wanted = None if config.classes is None else frozenset(config.classes)
        self._luts: dict[int, tuple[tuple[str, ...], np.ndarray, np.ndarray | None]] = {}

    def open(self, ctx: AnalyticsContext) -> None:
        for label in ctx.labels:
            self._class(label)

    def _class(self, label: str) -> int:
        c = self._classes.get(label)
        if c is None:
            c = self._classes[label] = len(self._names)
            self._names.append(label)
        return c

    def on_model_change(self, change: ModelChange) -> None:
        self._change = change

    def _apply_change(self, change: ModelChange) -> None:
        keep = [self._class(lb) for lb in change.new_labels]
        ended = self.tracker.end_classes(keep)
        for stream, ends in ended.items():
            self._pending.setdefault(stream, []).extend(ends)
        n = sum(len(v) for v in ended.values())
        gone = sorted(set(change.old_labels) - set(change.new_labels))
        _log.info(
            "tracking across %s:%s -> %s:%s: %d track(s) ended (labels the new model lacks: %s)",
            change.old_name, change.old_version, change.new_name, change.new_version, n, ", ".join(gone[:10]) or "none",
        )  # fmt: skip

    def process(self, results: list[Result]) -> list[Result]:
        change = self._change
        if change is not None and any(
            (r.model, r.model_version) == (change.new_name, change.new_version) for r in results
        ):
            self._change = None
            self._apply_change(change)
        # One flat set of arrays for the whole batch, from each frame's detection arrays (records only
        # where a decoder gave plain tuples): this runs for every frame of every stream.
        dets = [Detections.from_records(r.detections) for r in results]
        picks: list[np.ndarray | None] = []  # per frame: the detections tracked (None: every one)
        boxes, scores, cls, numbers = [], [], [], []
        for d in dets:
            if not len(d):
                picks.append(None)
                continue
            lut, wanted = self._lookup(d.label_table)
            classes = d.label_index
            if wanted is None:
                picks.append(None)
                boxes.append(d.boxes)
                scores.append(d.scores)
                cls.append(lut[classes])
                numbers.append(d.class_ids)
            else:
                pick = np.flatnonzero(wanted[classes])
                picks.append(pick)
                boxes.append(d.boxes[pick])
                scores.append(d.scores[pick])
                cls.append(lut[classes[pick]])
                numbers.append(d.class_ids[pick])
        sizes = [len(d) if p is None else len(p) for d, p in zip(dets, picks, strict=True)]
        offsets = [0, *itertools.accumulate(sizes)]
        all_boxes = np.concatenate(boxes).astype(np.float64, copy=False) if boxes else np.zeros((0, 4))
        all_scores = np.concatenate(scores).astype(np.float64, copy=False) if scores else np.zeros(0)
        all_cls = np.concatenate(cls) if cls else np.zeros(0, np.int64)
        if cls:  # the serving model's class number of each tracker class seen, for the tracks that end
            seen, first = np.unique(all_cls, return_index=True)
            self._class_ids.update(zip(seen.tolist(), np.concatenate(numbers)[first].tolist(), strict=True))
        frames = [
            FrameDetections(r.stream_id, r.sequence, r.timestamp, all_boxes[lo:hi], all_scores[lo:hi], all_cls[lo:hi])
            for r, lo, hi in zip(results, offsets, offsets[1:], strict=False)
        ]
        outs = self.tracker.update(frames)
        replaced = []
        for r, d, chosen, out in zip(results, dets, picks, outs, strict=True):
            ended = self._pending.pop(r.stream_id, []) + out.ended if self._pending else out.ended
            if not len(out.states) and not ended:
                replaced.append(r)
                continue
            ids, ages, states = out.ids, out.ages, out.states  # 0, 0, UNTRACKED where the tracker has none
            if chosen is not None:  # the detections not picked keep what they had
                found = states >= 0
                all_ids, all_ages, all_states = d.track_ids.copy(), d.track_ages.copy(), d.track_states.copy()
                at = chosen[found]
                all_ids[at], all_ages[at], all_states[at] = ids[found], ages[found], states[found]
                ids, ages, states = all_ids, all_ages, all_states
            elif d.tracked:
                found = states >= 0
                ids = np.where(found, ids, d.track_ids)
                ages = np.where(found, ages, d.track_ages)
                states = np.where(found, states, d.track_states)
            replaced.append(
                with_analytics(
                    r,
                    detections=d.with_tracks(ids, ages, states.astype(np.int8, copy=False)),
                    ended_tracks=tuple(map(self._ended, ended)) if ended else (),
                )
            )
        return replaced

    def _lookup(self, labels: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray | None]:
        """For a label table (a model's labels): its index → the tracker's class (by label), and → whether
        the stage tracks it (None: every label). Kept per table."""
        got = self._luts.get(id(labels))
        if got is None or got[0] is not labels:
            if len(self._luts) > 64:
                self._luts.clear()
            lut = np.array([self._class(n) for n in labels], np.int64)
            wanted = None if self._wanted is None else np.array([n in self._wanted for n in labels], bool)
            got = self._luts[id(labels)] = (labels, lut, wanted)
        return got[1], got[2]

    def _ended(self, e: TrackEnd) -> EndedTrack:
        label = self._names[e.cls]
        return EndedTrack(
            e.track_id,
            label,
            self._class_ids.get(e.cls, -1),
            e.reason,
            e.first_sequence,
            e.last_sequence,
            e.first_seen,
            e.last_seen,
            e.hits,
            e.box,
        )

    def on_stream_removed(self, stream_id: str) -> None:
        self.tracker.drop_stream(stream_id)
        self._pending.pop(stream_id, None)

    def stats(self) -> Mapping[str, float | int]:
        return {
            "tracks_active": self.tracker.active(),
            "tracks_started": self.tracker.started,
            "tracks_ended": self.tracker.ended,
        }
