"""Tracking with the real detector on the committed clip: ids that survive a hot swap to a model with
another input size and class list, and zones and lines configured in a pipeline YAML through
`edgefleet run` (counts in the JSONL, a bad zone refused with one line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import track_swap

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


@pytest.fixture(scope="module")
def nanodet_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return track_swap.build_v2(tmp_path_factory.mktemp("v2") / "nanodet-m-2.0.0")


@pytest.fixture(scope="module")
def reference() -> track_swap.SwapTracks:
    """The clip on two streams, tracked without a swap."""
    return track_swap.track(None, streams=2)


def test_a_swap_to_the_same_model_changes_no_id(tmp_path: Path, reference: track_swap.SwapTracks) -> None:
    same = track_swap.same_model(tmp_path / "nanodet-m-1.0.1")
    got = track_swap.compare(track_swap.track(same, streams=2), reference)
    assert got["swap_ok"] is True and set(got["results_by_version"]) == {"1.0.0", "1.0.1"}
    at = got["at_swap"]
    assert at["id_switches_vs_reference"] == 0, got
    assert at["same_id_within_10_frames"] == at["tracked_before"] >= 6, got
    assert at["new_id_on_an_object_tracked_before"] == 0, got


def test_person_tracks_keep_their_ids_across_the_hot_swap_416_to_320(
    nanodet_v2: Path, reference: track_swap.SwapTracks
) -> None:
    got = track_swap.compare(track_swap.track(nanodet_v2, streams=2), reference)
    assert got["swap_ok"] is True and set(got["results_by_version"]) == {"1.0.0", "2.0.0"}
    at = got["at_swap"]
    assert at["new_id_on_an_object_tracked_before"] == 0, got  # no person's track restarts at the cut-over
    assert at["same_id_within_10_frames"] >= at["tracked_before"] - 1 >= 5, got
    assert at["class_gone"] == 0, got  # person is in both models' labels
    assert 10 <= got["tracks"] <= 60 and got["mean_track_length_frames"] >= 40, got
    assert got["analytics"]["track"]["tracks_started"] >= got["tracks"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEFLEET, "run", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def test_edgefleet_run_with_zones_and_a_line_from_yaml(tmp_path: Path) -> None:
    cfg = {
        "model": str(track_swap.V1),
        "sources": [str(track_swap.CLIP)],
        "score_threshold": track_swap.SCORE_THRESHOLD,
        "max_frames": 120,
        "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")}],
        "analytics": [
            track_swap.TRACK,
            {
                "type": "zones",
                "zones": [{"name": "road", "points": [[0, 190], [768, 190], [768, 330], [0, 300]]}],
                "lines": [{"name": "gate", "points": [[384, 150], [384, 400]], "classes": ["person"]}],
            },
        ],
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    out = _run(["--config", "p.yaml", "--quiet"], tmp_path)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 120
    ids = {d["track_id"] for r in rows for d in r.get("detections", ()) if "track_id" in d}
    assert len(ids) >= 5
    last = {g["name"]: g for g in rows[-1]["regions"]}
    assert last["road"]["kind"] == "zone" and sum(last["road"]["inside"].values()) >= 1
    crossings = [e for r in rows for e in r.get("events", ()) if e["kind"] == "cross"]
    assert sum(last["gate"]["in"].values()) + sum(last["gate"]["out"].values()) == len(crossings) >= 1

    cfg["analytics"][1]["zones"][0]["points"] = [[0, 0], [1, 1]]  # two points: not a zone
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cfg))
    bad = _run(["--config", "bad.yaml", "--quiet"], tmp_path)
    assert bad.returncode != 0
    assert "Traceback" not in bad.stderr
    line = bad.stderr.strip().splitlines()[-1]
    assert "bad.yaml" in line and "zones" in line and "points" in line, bad.stderr
