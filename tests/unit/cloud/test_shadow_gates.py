"""A rollout's shadow gates: checked at CreateRollout (one clear line each), carried to every apply
command as ``ApplyModel.shadow``, shown back on the Rollout."""

from __future__ import annotations

import pytest

from edgefleet.cloud._agents import command_pb
from edgefleet.cloud._convert import rollout_pb
from edgefleet.cloud._errors import InvalidArgumentError
from edgefleet.cloud._shadow_gates import shadow_params, shadow_pb
from edgefleet.proto.v1 import fleet_pb2


def test_shadow_fields_are_checked_and_kept_when_set() -> None:
    req = fleet_pb2.CreateRolloutRequest(min_shadow_f1=0.8, shadow_sample_rate=0.25, shadow_min_frames=20)
    assert shadow_params(req) == {"min_shadow_f1": 0.8, "shadow_sample_rate": 0.25, "shadow_min_frames": 20.0}
    assert shadow_params(fleet_pb2.CreateRolloutRequest()) == {}  # no gate: no shadow phase
    for field, value, what in [
        ("min_shadow_f1", 1.5, "min shadow f1 must be 0..1"),
        ("max_class_mix_shift", float("nan"), "max class mix shift must be 0..1"),
        ("max_detection_rate_change", -1.0, "max detection rate change must be 0..1000"),
        ("shadow_max_s", 1e9, "shadow max s must be 0..3600"),
    ]:
        with pytest.raises(InvalidArgumentError, match=what):
            shadow_params(fleet_pb2.CreateRolloutRequest(**{field: value}))
    with pytest.raises(InvalidArgumentError, match="without a shadow gate"):
        shadow_params(fleet_pb2.CreateRolloutRequest(shadow_sample_rate=0.5))


def test_apply_commands_of_a_gated_rollout_carry_the_shadow_gate() -> None:
    row = {"command_id": "r.d.apply", "rollout_id": "r", "kind": "apply", "ref": "m:2.0.0", "sha256": "ab"}
    row |= {"model_name": "m", "health_window_s": 5.0}
    plain = command_pb(row, None, {"health_window_s": 5.0})
    assert not plain.command.apply.HasField("shadow")
    gated = command_pb(row, None, {"min_shadow_f1": 0.8, "shadow_min_frames": 12.0}).command.apply
    assert gated.HasField("shadow") and gated.shadow.min_f1 == pytest.approx(0.8) and gated.shadow.min_frames == 12
    assert shadow_pb({"max_detection_rate_change": 0.3}) is not None and shadow_pb({}) is None


def test_the_rollout_shows_its_shadow_gates() -> None:
    row = {
        "rollout_id": "r", "model_ref": "m:2", "sha256": "ab", "selector": {}, "waves": ["100%"],
        "state": "running", "current_wave": 0, "message": "", "created_at": 0.0, "updated_at": 0.0,
        "params": {"min_shadow_f1": 0.7, "shadow_min_frames": 10.0}, "devices": [],
    }  # fmt: skip
    pb = rollout_pb(row)
    assert pb.min_shadow_f1 == pytest.approx(0.7) and pb.shadow_min_frames == 10 and pb.max_class_mix_shift == 0


def test_the_shadow_phase_is_checked_and_carried() -> None:
    req = fleet_pb2.CreateRolloutRequest(min_shadow_f1=0.8, shadow_phase="after")
    params = shadow_params(req)
    assert params["shadow_phase"] == "after"
    pb = shadow_pb(params)
    assert pb is not None and pb.phase == "after"
    with pytest.raises(InvalidArgumentError, match="shadow phase must be before, after or both, got 'later'"):
        shadow_params(fleet_pb2.CreateRolloutRequest(min_shadow_f1=0.8, shadow_phase="later"))
    with pytest.raises(InvalidArgumentError, match="shadow phase given without a shadow gate"):
        shadow_params(fleet_pb2.CreateRolloutRequest(shadow_phase="both"))
