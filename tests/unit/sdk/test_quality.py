"""Per-version quality KPIs (``_quality``): the formulas on hand-made results, two versions kept."""

from __future__ import annotations

import dataclasses

import pytest

from edgefleet.sdk import Classification, Detection, Result
from edgefleet.sdk._quality import QualityMeter


def r(seq: int, *dets: Detection, ended: int = 0, top: str | None = None) -> Result:
    res = Result("cam", seq, 0.0, "m", "1", 64, 64, 1.0, tuple(dets))
    if top is not None:
        res = dataclasses.replace(res, classifications=(Classification(0, top, 0.9),))
    if ended:
        res = dataclasses.replace(res, ended_tracks=tuple([object()] * ended))  # type: ignore[list-item]
    return res


def d(label: str, score: float, state: str = "") -> Detection:
    return Detection((0, 0, 1, 1), score, 0, label, track_id=1 if state else None, track_state=state)


def test_detections_per_frame_empty_ratio_mix_confidence_and_churn() -> None:
    m = QualityMeter()
    m.add("m:1", [r(0, d("person", 0.9, "new"), d("car", 0.5)), r(1), r(2, d("person", 0.7, "tracked"), ended=1)])
    q = m.snapshot()["m:1"]
    assert (q.frames, q.detections) == (3, 3)
    assert q.detections_per_frame == pytest.approx(1.0) and q.empty_frame_ratio == pytest.approx(1 / 3)
    assert q.class_mix == pytest.approx({"person": 2 / 3, "car": 1 / 3})
    assert (q.confidence_p10, q.confidence_p50, q.confidence_p90) == pytest.approx((0.505, 0.705, 0.905))
    assert q.new_tracks_per_frame == pytest.approx(1 / 3) and q.ended_tracks_per_frame == pytest.approx(1 / 3)


def test_two_versions_are_kept_the_oldest_forgotten_and_classifiers_count_top1() -> None:
    m = QualityMeter(keep=2, top=1)
    m.add("m:1", [r(0, d("a", 0.9))])
    m.add("m:2", [r(1, top="cat"), r(2, top="dog"), r(3, top="cat")])
    assert list(m.snapshot()) == ["m:1", "m:2"]
    assert m.snapshot()["m:2"].class_mix == pytest.approx({"cat": 2 / 3, "other": 1 / 3})  # top=1: the rest summed
    m.add("m:3", [r(4)])
    assert list(m.snapshot()) == ["m:2", "m:3"]
    assert m.snapshot()["m:3"].empty_frame_ratio == 1.0
