"""How far a model version's results are from a reference version's on the same frames: detections
matched at IoU 0.5 within a class (recall and precision against the reference), or a classifier's top-1
agreement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._results import Classification, Detection

__all__ = ["CONFIDENT", "Agreement", "detection_agreement", "top1_agreement"]

#: a classifier's best score from which the reference counts as sure of its class
CONFIDENT = 0.5


@dataclass
class Agreement:
    """Running totals over frames. ``recall`` = matched / reference detections, ``precision`` = matched /
    candidate detections (None before any); ``top1`` = frames whose best class agrees / frames;
    ``top1_confident``: the same over the frames where the reference's best score is at least
    :data:`CONFIDENT` (a flip between two classes the reference itself barely tells apart weighs less)."""

    reference: int = 0
    candidate: int = 0
    matched: int = 0
    frames: int = 0
    top1_same: int = 0
    confident: int = 0
    confident_same: int = 0

    @property
    def recall(self) -> float | None:
        return self.matched / self.reference if self.reference else None

    @property
    def precision(self) -> float | None:
        return self.matched / self.candidate if self.candidate else None

    @property
    def top1(self) -> float | None:
        return self.top1_same / self.frames if self.frames else None

    @property
    def top1_confident(self) -> float | None:
        return self.confident_same / self.confident if self.confident else None


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, 4) x (m, 4) -> (n, m) IoU."""
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    out: np.ndarray = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    return out


def detection_agreement(
    total: Agreement, reference: Sequence[Detection], candidate: Sequence[Detection], iou: float = 0.5
) -> None:
    """Add one frame: each reference detection, best first, takes the unmatched candidate of its class
    with the highest IoU, if that IoU is at least ``iou``."""
    total.frames += 1
    total.reference += len(reference)
    total.candidate += len(candidate)
    if not reference or not candidate:
        return
    ref = sorted(reference, key=lambda d: -d.score)
    ious = _iou(np.array([d.box for d in ref], np.float64), np.array([d.box for d in candidate], np.float64))
    same = np.array([[r.class_id == c.class_id for c in candidate] for r in ref])
    ious[~same] = -1.0
    taken = np.zeros(len(candidate), bool)
    for scores in ious:
        row = np.where(taken, -1.0, scores)
        j = int(row.argmax())
        if row[j] >= iou:
            taken[j] = True
            total.matched += 1


def top1_agreement(total: Agreement, reference: Sequence[Classification], candidate: Sequence[Classification]) -> None:
    """Add one frame: do the two versions put the same class first?"""
    total.frames += 1
    same = bool(reference and candidate and reference[0].class_id == candidate[0].class_id)
    total.top1_same += same
    if reference and reference[0].score >= CONFIDENT:
        total.confident += 1
        total.confident_same += same
