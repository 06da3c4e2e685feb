"""Tracking on a GPU pipeline: the analytics stages run on the result thread whatever the device, and
their cost shows as the pipeline's ``analytics`` stage (64 streams: tools/bench/gpu_bench.py --analytics)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefleet.sdk import Pipeline
from tests.support import track_swap

pytestmark = pytest.mark.gpu


def test_tracked_detections_and_zone_counts_on_cuda(ort_cuda: str, nanodet: Path, clip: Path) -> None:
    zones = {"type": "zones", "lines": [{"name": "gate", "points": [[0.5, 0], [0.5, 1]], "normalized": True}]}
    with Pipeline(
        nanodet,
        [f"a={clip}", f"b={clip}"],
        device=ort_cuda,
        max_batch=2,
        max_frames=120,
        score_threshold=track_swap.SCORE_THRESHOLD,
        analytics=[track_swap.TRACK, zones],
    ) as p:
        results = list(p.results())
        stats = p.stats()
    assert len(results) == 240
    ids = {(r.stream_id, d.track_id) for r in results for d in r.detections if d.track_id is not None}
    assert len({i for s, i in ids if s == "a"}) >= 5 and len({i for s, i in ids if s == "b"}) >= 5
    assert all(r.regions and r.regions[0].name == "gate" for r in results)
    assert stats.analytics["track"]["tracks_started"] >= 10
    assert stats.stages["analytics"].items == 240
