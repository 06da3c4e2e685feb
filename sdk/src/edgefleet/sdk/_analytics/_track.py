"""The ``track`` analytics stage: ByteTrack over every stream, track ids that survive a hot swap."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .._errors import ConfigError
from .._results import Detection, EndedTrack, Result, with_analytics
from ._assign import solver
from ._base import AnalyticsConfig, AnalyticsContext, AnalyticsStage, ModelChange
from ._bytetrack import NEW, TENTATIVE, TRACKED, ByteTracker, FrameDetections, TrackEnd, TrackerParams

__all__ = ["TrackConfig", "TrackStage"]

_log = logging.getLogger(__name__)
_STATES = {TENTATIVE: "tentative", TRACKED: "tracked", NEW: "new"}


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
        wanted, classes, class_ids = self._wanted, self._classes, self._class_ids
        # One flat list for the whole batch (three numpy arrays, not three per frame), built with
        # comprehensions: this runs for every detection of every frame.
        picks: list[list[int] | None] = [  # per frame: the detections tracked (None: every one)
            None if wanted is None else [i for i, d in enumerate(r.detections) if d.label in wanted] for r in results
        ]
        flat = [
            d
            for r, pick in zip(results, picks, strict=True)
            for d in (r.detections if pick is None else [r.detections[i] for i in pick])
        ]
        offsets = [
            0,
            *itertools.accumulate(
                len(r.detections) if p is None else len(p) for r, p in zip(results, picks, strict=True)
            ),
        ]
        for label, class_id in {d.label: d.class_id for d in flat}.items():  # the serving model's numbers
            c = classes.get(label)
            class_ids[self._class(label) if c is None else c] = class_id
        all_boxes = np.array([d.box for d in flat], np.float64).reshape(-1, 4)
        all_scores = np.array([d.score for d in flat], np.float64)
        all_cls = np.array([classes[d.label] for d in flat], np.int64)
        frames = [
            FrameDetections(r.stream_id, r.sequence, r.timestamp, all_boxes[lo:hi], all_scores[lo:hi], all_cls[lo:hi])
            for r, lo, hi in zip(results, offsets, offsets[1:], strict=False)
        ]
        outs = self.tracker.update(frames)
        replaced = []
        for r, pick, out in zip(results, picks, outs, strict=True):
            ended = self._pending.pop(r.stream_id, []) + out.ended if self._pending else out.ended
            states = out.states.tolist()
            if not states and not ended:
                replaced.append(r)
                continue
            tracked: list[Detection] = list(r.detections)
            ids, ages = out.ids.tolist(), out.ages.tolist()
            for j, state in enumerate(states):
                if state >= 0:
                    i = j if pick is None else pick[j]
                    tracked[i] = tracked[i].with_track(ids[j] or None, ages[j], _STATES[state])
            replaced.append(
                with_analytics(r, detections=tuple(tracked), ended_tracks=tuple(self._ended(e) for e in ended))
            )
        return replaced

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
