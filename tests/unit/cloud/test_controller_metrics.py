"""The controller's own /metrics: the status code a gRPC call is counted under, and the gates that
failed the members of the current rollouts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc

from edgefleet.cloud._controller_metrics import ControllerCollector, _code, _split, failed_gates
from edgefleet.cloud._db import create_engine, migrate, rollout_devices, rollouts


class _Context:
    def __init__(self, code: grpc.StatusCode | None) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode | None:
        return self._code


def test_calls_are_counted_by_the_code_they_ended_with() -> None:
    assert _code(_Context(None), None) == "OK"
    assert _code(_Context(grpc.StatusCode.INVALID_ARGUMENT), Exception("aborted")) == "INVALID_ARGUMENT"
    assert _code(_Context(None), asyncio.CancelledError()) == "CANCELLED"  # an agent's stream at its restart
    assert _code(_Context(None), RuntimeError("bug")) == "UNKNOWN"
    assert _split("/edgefleet.proto.v1.FleetService/ListDevices") == ("FleetService", "ListDevices")


def test_the_gate_that_failed_each_member_is_named_from_its_message() -> None:
    shadow = (
        "refused at shadow: shadow gate: shadow_f1 0.000 < min_shadow_f1 0.7; "
        "shadow_class_mix_shift 0.887 > max_class_mix_shift 0.2"
    )
    assert failed_gates(shadow) == ["shadow_f1", "shadow_class_mix_shift"]
    assert failed_gates("pipeline cam: quality_detection_rate_change -0.950 exceeds ±0.5 (0.20 vs 4.1)") == [
        "quality_detection_rate_change"
    ]
    assert failed_gates("pipeline cam at 3.2 fps < 10.0") == ["min_fps"]
    assert failed_gates("pipeline cam p95 812.0 ms > 200.0") == ["max_latency_ms"]
    assert failed_gates("camera not streaming: door reconnecting (refused) for 4 s") == ["cameras"]
    assert failed_gates("download failed: sha256 mismatch") == ["other"]


def test_failed_members_of_the_current_rollouts_are_series_by_gate(tmp_path: Path) -> None:
    """A real SQLite store: the failed members of the newest rollout and of a running one are series, an
    older finished rollout's are not (bounded), and a member that succeeded is not."""
    engine = create_engine(f"sqlite:///{tmp_path}/c.db")
    migrate(engine, time.time)
    now = time.time()
    ro = {"model_name": "det", "sha256": "0" * 64, "selector": {}, "waves": ["100%"], "params": {}, "message": ""}
    with engine.begin() as c:
        for rid, state, at in (
            ("r-old", "aborted", now - 60),
            ("r-run", "running", now - 30),
            ("r-new", "aborted", now),
        ):
            c.execute(
                rollouts.insert().values(
                    rollout_id=rid, model_ref="det:2", state=state, created_at=at, updated_at=at, **ro
                )
            )
        members = (
            ("r-old", "a1", "failed", "pipeline cam at 1.0 fps < 5.0"),
            ("r-run", "a2", "failed", "camera not streaming: door reconnecting (refused) for 4 s"),
            ("r-new", "a1", "failed", "refused at shadow: shadow gate: shadow_f1 0.000 < min_shadow_f1 0.7"),
            ("r-new", "a3", "succeeded", ""),
            # rolled back after its own failure: the reason kept in front; rolled back with its wave: none
            ("r-new", "a4", "rolled_back", "failed: pipeline cam p95 812.0 ms > 200.0; back on det:1"),
            ("r-new", "a5", "rolled_back", "back on det:1"),
        )
        for rid, dev, state, msg in members:
            c.execute(
                rollout_devices.insert().values(
                    rollout_id=rid, device_id=dev, wave=0, state=state, message=msg, updated_at=now
                )
            )
    collector = ControllerCollector(lambda: [], engine, replica="r", version="0", camera_grace_s=10, stale_s=30)
    family = next(m for m in collector.collect() if m.name == "edgefleet_rollout_member_gate_failed")
    assert sorted(tuple(s.labels.values()) for s in family.samples) == [
        ("r-new", "a1", "shadow_f1"),
        ("r-new", "a4", "max_latency_ms"),
        ("r-run", "a2", "cameras"),
    ]
