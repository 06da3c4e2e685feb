"""What each model version sees after it serves: per-version quality KPIs (issue 22).

The result thread counts every delivered result (after the analytics stages, so tracks are known) under
the version that produced it; the current version and the one before it are kept, so a hot swap's new
version can be compared with the device's own baseline. Figures, over every frame a version served:

* ``detections_per_frame`` = detections / frames; ``empty_frame_ratio`` = frames without a detection /
  frames;
* ``class_mix``: each label's share of the detections (the ``top`` most frequent labels; the rest are
  summed under ``"other"``);
* ``confidence_p10/p50/p90``: quantiles of the detection scores, read from a 100-bin histogram over
  [0, 1] (exact to 0.01);
* tracker churn (with a ``track`` stage): ``new_tracks_per_frame`` (detections whose track got its id on
  that frame) and ``ended_tracks_per_frame`` (tracks ended on it);
* classification models: ``top1_mix``, the share of frames per top-1 label, in ``class_mix``.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ._detections import TRACK_NEW, Detections, label_counts
from ._results import Result

__all__ = ["QualityMeter", "VersionQuality"]

_BINS = 100


@dataclass(frozen=True)
class VersionQuality:
    """One version's quality KPIs so far (formulas: module docstring)."""

    model_ref: str
    frames: int
    detections: int
    detections_per_frame: float
    empty_frame_ratio: float
    class_mix: dict[str, float] = field(default_factory=dict)
    confidence_p10: float = 0.0
    confidence_p50: float = 0.0
    confidence_p90: float = 0.0
    new_tracks_per_frame: float = 0.0
    ended_tracks_per_frame: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Counts:
    def __init__(self) -> None:
        self.frames = self.detections = self.empty = self.new_tracks = self.ended = 0
        self.labels: Counter[str] = Counter()
        self.scores = np.zeros(_BINS, np.int64)


class QualityMeter:
    """Counts results per version (thread-safe; ``keep`` versions, the oldest forgotten first)."""

    def __init__(self, keep: int = 2, top: int = 12) -> None:
        self.keep, self.top = keep, top
        self._lock = threading.Lock()
        self._versions: OrderedDict[str, _Counts] = OrderedDict()

    def add(self, model_ref: str, results: Sequence[Result], labels: Counter[str] | None = None) -> None:
        """Result thread: one batch's results, all from ``model_ref``; ``labels``: their detections per
        label, when the caller counted them already (``label_counts``)."""
        columns = [Detections.from_records(r.detections) for r in results if r.detections]
        if labels is None:
            labels = label_counts(columns)
        with self._lock:
            c = self._versions.get(model_ref)
            if c is None:
                c = self._versions[model_ref] = _Counts()
                while len(self._versions) > self.keep:
                    self._versions.popitem(last=False)
            else:
                self._versions.move_to_end(model_ref)
            for r in results:
                c.frames += 1
                c.detections += len(r.detections)
                c.ended += len(r.ended_tracks)
                if not r.detections:
                    c.empty += 1
                    if r.classifications:
                        c.labels[r.classifications[0].label] += 1
            c.labels.update(labels)
            if columns:  # a few numpy calls for the batch
                tracked = [d.track_states for d in columns if d.tracked]
                if tracked:
                    c.new_tracks += int(np.count_nonzero(np.concatenate(tracked) == TRACK_NEW))
                scores = np.concatenate([d.scores for d in columns])
                idx = np.clip((scores * _BINS).astype(np.int64), 0, _BINS - 1)
                c.scores += np.bincount(idx, minlength=_BINS)

    def snapshot(self) -> dict[str, VersionQuality]:
        """Every kept version's KPIs, oldest first (the last one serves now, or served last)."""
        with self._lock:
            return {ref: self._quality(ref, c) for ref, c in self._versions.items()}

    def _quality(self, ref: str, c: _Counts) -> VersionQuality:
        frames = max(c.frames, 1)
        total = sum(c.labels.values())
        mix = {k: v / total for k, v in c.labels.most_common(self.top)} if total else {}
        rest = 1.0 - sum(mix.values())
        if total and rest > 1e-9:
            mix["other"] = rest
        q = _quantiles(c.scores, (0.1, 0.5, 0.9))
        return VersionQuality(
            model_ref=ref,
            frames=c.frames,
            detections=c.detections,
            detections_per_frame=c.detections / frames,
            empty_frame_ratio=c.empty / frames,
            class_mix=mix,
            confidence_p10=q[0],
            confidence_p50=q[1],
            confidence_p90=q[2],
            new_tracks_per_frame=c.new_tracks / frames,
            ended_tracks_per_frame=c.ended / frames,
        )


def _quantiles(hist: np.ndarray, qs: tuple[float, ...]) -> tuple[float, ...]:
    total = int(hist.sum())
    if total == 0:
        return tuple(0.0 for _ in qs)
    cum = np.cumsum(hist)
    return tuple(float((np.searchsorted(cum, q * total) + 0.5) / _BINS) for q in qs)
