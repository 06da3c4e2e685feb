"""The health window's quality gate: a device's new version against its own baseline (the version it
served before), from its status report as the controller stores it (MessageToDict: uint64 as strings)."""

from __future__ import annotations

from typing import Any

from google.protobuf.json_format import MessageToDict

from edgefleet.cloud._rollouts import health_verdict
from edgefleet.cloud._shadow_gates import quality_baselines, quality_verdict
from edgefleet.proto.v1 import common_pb2

PARAMS = {"max_detection_rate_change": 0.5, "max_class_mix_shift": 0.2, "shadow_min_frames": 30}


def pipeline(new: dict[str, Any], frames: int = 100) -> dict[str, Any]:
    base = {
        "model_ref": "m:1",
        "frames": 500,
        "detections_per_frame": 10.0,
        "class_mix": {"person": 0.7, "car": 0.2, "dog": 0.1},
    }
    msg = common_pb2.PipelineStatus(name="cam", model_ref="m:2", state="running")
    msg.quality.add(**base)
    msg.quality.add(model_ref="m:2", frames=frames, **new)
    return MessageToDict(msg, preserving_proto_field_name=True)


def test_a_version_that_sees_like_its_baseline_passes() -> None:
    assert (
        quality_verdict(
            PARAMS, pipeline({"detections_per_frame": 8.0, "class_mix": {"person": 0.8, "car": 0.2}}), "m:2"
        )
        == ""
    )


def test_a_blind_version_fails_on_the_detection_rate_and_a_relabelled_one_on_the_mix() -> None:
    blind = quality_verdict(PARAMS, pipeline({"detections_per_frame": 0.0}), "m:2")
    assert "quality_detection_rate_change -1.000 exceeds ±0.5" in blind and "vs 10.00 on m:1" in blind
    mixed = quality_verdict(
        PARAMS, pipeline({"detections_per_frame": 9.0, "class_mix": {"car": 0.9, "person": 0.1}}), "m:2"
    )
    assert "quality_class_mix_shift" in mixed


def test_too_few_frames_or_no_gate_is_no_verdict_yet() -> None:
    assert quality_verdict(PARAMS, pipeline({"detections_per_frame": 0.0}, frames=10), "m:2") == ""
    assert quality_verdict({"min_fps": 5}, pipeline({"detections_per_frame": 0.0}), "m:2") == ""


def test_the_rollouts_health_verdict_applies_it() -> None:
    ro = {"params": PARAMS, "model_name": "m", "model_ref": "m:2"}
    p = pipeline({"detections_per_frame": 0.0}) | {"health": {"healthy": True}}
    ok, why = health_verdict(ro, {"health_at": 10.0, "pipelines": [p]}, 5.0)
    assert ok is False and "quality_detection_rate_change" in why


def test_the_controller_keeps_the_baseline_from_when_the_rollout_was_created() -> None:
    before = pipeline({"detections_per_frame": 3.0})  # the status report as stored when the rollout starts
    before["model_ref"] = "m:1"
    devices = [{"device_id": "d1", "pipelines": [before]}, {"device_id": "d2", "pipelines": []}]
    kept = quality_baselines(PARAMS, devices, "m")
    assert list(kept["baselines"]) == ["d1"] and kept["baselines"]["d1"]["cam"]["model_ref"] == "m:1"
    assert quality_baselines({"min_shadow_f1": 0.5}, devices, "m") == {}  # no quality gate: nothing kept
    # the agent restarted after its swap: its report holds only the new version, the baseline is the kept one
    msg = common_pb2.PipelineStatus(name="cam", model_ref="m:2")
    msg.quality.add(model_ref="m:2", frames=100, detections_per_frame=0.0)
    after = MessageToDict(msg, preserving_proto_field_name=True)
    assert quality_verdict(PARAMS, after, "m:2", "d2") == ""  # no baseline for d2: no opinion
    why = quality_verdict(PARAMS | kept, after, "m:2", "d1")
    assert "quality_detection_rate_change -1.000" in why and "on m:1" in why
