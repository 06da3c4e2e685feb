"""Agreement between a candidate model and the serving one, frame by frame (shadow mode's arithmetic).

Only labels both versions can output are compared (``shared labels``): a candidate with 6 classes beside a
serving model with 80 is judged on those 6, and every detection of another label, on either side, is left
out of every figure (counted in ``excluded``). A version's labels are its decoder's ``classes`` when the
manifest keeps a subset, else every label of its package. Labels are compared by name, so a package
whose label order is shuffled outputs names that disagree with what the boxes are, and it shows.

Formulas (S: serving detections on shared labels over the compared frames, C: the candidate's, TP: pairs
matched greedily by descending candidate score, same label, IoU >= ``iou``, each serving box used once):

* precision = TP / |C|, recall = TP / |S|, F1 = 2·TP / (|S| + |C|) (1.0 when both are empty: they agree)
* class count ratio per label = C_label / S_label (labels the serving version saw at least once)
* class mix shift = ½ · Σ_label |C_label/|C| - S_label/|S|| (total variation distance, 0 = same mix,
  1 = disjoint; 1 when exactly one side saw nothing, 0 when both did)
* detection rate change = (|C| - |S|) / max(|S|, 1)
* mean confidence shift = mean score of C - mean score of S (0 when either side is empty)
* top-1 agreement = frames whose top-1 classification labels are equal / frames where both classified
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._results import Classification, Detection

__all__ = ["Agreement", "AgreementCounter", "output_labels"]


def output_labels(labels: Sequence[str], decoder_params: dict[str, Any]) -> frozenset[str]:
    """The labels a version can output: its decoder's ``classes`` when it keeps a subset, else all."""
    classes = decoder_params.get("classes")
    if isinstance(classes, (list, tuple)) and classes:
        return frozenset(str(c) for c in classes)
    return frozenset(labels)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` (n, 4) with every box in ``b`` (m, 4), x1 y1 x2 y2."""
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def match(serving: Sequence[Detection], candidate: Sequence[Detection], iou: float = 0.5) -> int:
    """True positives: candidate boxes (best score first) matched to an unused serving box of the same
    label with IoU >= ``iou``."""
    if not serving or not candidate:
        return 0
    ious = _iou(np.array([d.box for d in candidate], float), np.array([d.box for d in serving], float))
    same = np.array([[c.label == s.label for s in serving] for c in candidate])
    ious = np.where(same, ious, 0.0)
    used = np.zeros(len(serving), bool)
    tp = 0
    for i in np.argsort([-c.score for c in candidate], kind="stable"):
        row = np.where(used, 0.0, ious[i])
        j = int(np.argmax(row))
        if row[j] >= iou:
            used[j] = True
            tp += 1
    return tp


@dataclass(frozen=True)
class Agreement:
    """Shadow agreement KPIs over the frames compared so far (formulas: module docstring)."""

    frames: int
    serving_detections: int
    candidate_detections: int
    matched: int
    precision: float
    recall: float
    f1: float
    class_counts: dict[str, tuple[int, int]]  # label -> (serving, candidate)
    class_count_ratio: dict[str, float]
    class_mix_shift: float
    detection_rate_change: float
    serving_per_frame: float
    candidate_per_frame: float
    mean_confidence_shift: float
    top1_frames: int
    top1_agreement: float | None
    shared_labels: tuple[str, ...]
    excluded: int
    latency_p50_ms: float = 0.0
    latency_p95_ms: float = 0.0
    sampled: int = 0
    dropped: int = 0
    skipped_budget: int = 0
    busy_ratio: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("class_counts", "extra", "shared_labels")}
        out["class_counts"] = {k: list(v) for k, v in self.class_counts.items()}
        out["shared_labels"] = list(self.shared_labels)
        return out

    def metrics(self, prefix: str = "shadow_") -> dict[str, float]:
        """The scalar KPIs as a flat ``{name: value}`` map (command events, telemetry)."""
        keys = (
            "frames", "precision", "recall", "f1", "class_mix_shift", "detection_rate_change",
            "serving_per_frame", "candidate_per_frame", "mean_confidence_shift", "latency_p50_ms",
            "latency_p95_ms", "sampled", "dropped", "skipped_budget", "busy_ratio",
        )  # fmt: skip
        out = {prefix + k: float(getattr(self, k)) for k in keys}
        if self.top1_agreement is not None:
            out[prefix + "top1_agreement"] = float(self.top1_agreement)
        return out


class AgreementCounter:
    """Accumulates frame pairs (serving, candidate) into :class:`Agreement`. Not thread-safe: one owner."""

    def __init__(self, serving_labels: Iterable[str], candidate_labels: Iterable[str], iou: float = 0.5) -> None:
        self.shared = frozenset(serving_labels) & frozenset(candidate_labels)
        self.iou = iou
        self.frames = 0
        self.matched = 0
        self.excluded = 0
        self.serving: Counter[str] = Counter()
        self.candidate: Counter[str] = Counter()
        self.score_sum = [0.0, 0.0]  # serving, candidate
        self.top1_frames = 0
        self.top1_agree = 0

    def _shared(self, dets: Sequence[Detection]) -> list[Detection]:
        kept = [d for d in dets if d.label in self.shared]
        self.excluded += len(dets) - len(kept)
        return kept

    def add(
        self,
        serving: Sequence[Detection],
        candidate: Sequence[Detection],
        serving_top: Sequence[Classification] = (),
        candidate_top: Sequence[Classification] = (),
    ) -> None:
        s, c = self._shared(serving), self._shared(candidate)
        self.frames += 1
        self.matched += match(s, c, self.iou)
        self.serving.update(d.label for d in s)
        self.candidate.update(d.label for d in c)
        self.score_sum[0] += sum(d.score for d in s)
        self.score_sum[1] += sum(d.score for d in c)
        st = [k for k in serving_top if k.label in self.shared][:1]
        ct = [k for k in candidate_top if k.label in self.shared][:1]
        if serving_top and candidate_top:
            self.top1_frames += 1
            self.top1_agree += int(bool(st and ct and st[0].label == ct[0].label))

    def result(self, **extra: Any) -> Agreement:
        ns, nc, tp = sum(self.serving.values()), sum(self.candidate.values()), self.matched
        labels = sorted(set(self.serving) | set(self.candidate))
        if ns and nc:
            shift = 0.5 * sum(abs(self.candidate[k] / nc - self.serving[k] / ns) for k in labels)
        else:
            shift = 0.0 if ns == nc else 1.0
        frames = max(self.frames, 1)
        return Agreement(
            frames=self.frames,
            serving_detections=ns,
            candidate_detections=nc,
            matched=tp,
            precision=tp / nc if nc else (1.0 if ns == 0 else 0.0),
            recall=tp / ns if ns else (1.0 if nc == 0 else 0.0),
            f1=2.0 * tp / (ns + nc) if ns + nc else 1.0,
            class_counts={k: (self.serving[k], self.candidate[k]) for k in labels},
            class_count_ratio={k: self.candidate[k] / self.serving[k] for k in labels if self.serving[k]},
            class_mix_shift=shift,
            detection_rate_change=(nc - ns) / max(ns, 1),
            serving_per_frame=ns / frames,
            candidate_per_frame=nc / frames,
            mean_confidence_shift=(self.score_sum[1] / nc - self.score_sum[0] / ns) if ns and nc else 0.0,
            top1_frames=self.top1_frames,
            top1_agreement=self.top1_agree / self.top1_frames if self.top1_frames else None,
            shared_labels=tuple(sorted(self.shared)),
            excluded=self.excluded,
            **extra,
        )
