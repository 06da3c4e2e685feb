"""The agent turns a controller's ``ApplyModel.shadow`` into the SDK's shadow gate (0 on the wire: unset)."""

from __future__ import annotations

from edgefleet.edge._model_updates import shadow_gate as agent_gate
from edgefleet.edge._pipeline_host import shadow_metrics
from edgefleet.proto.v1 import agent_pb2
from edgefleet.sdk._swap import shadow_gate


def test_the_agents_apply_command_becomes_a_shadow_gate() -> None:
    assert agent_gate(agent_pb2.ApplyModel()) is None  # no shadow message: no shadow phase
    apply = agent_pb2.ApplyModel(shadow=agent_pb2.ShadowGate(min_f1=0.8, sample_rate=0.25, min_frames=10))
    gate = shadow_gate(agent_gate(apply))
    assert gate is not None and gate.min_f1 == 0.8 and gate.min_frames == 10 and gate.shadow.sample_rate == 0.25
    assert gate.max_class_mix_shift is None and gate.shadow.max_busy == 0.5  # 0 on the wire: unchecked / default


def test_shadow_metrics_are_flat_numbers() -> None:
    assert shadow_metrics(None) == {}
    out = shadow_metrics({"f1": 0.5, "frames": 12, "shared_labels": ["a"], "top1_agreement": None, "ok": True})
    assert out == {"shadow_f1": 0.5, "shadow_frames": 12.0}


def test_the_phase_reaches_the_sdk_and_a_bad_one_is_one_clear_error() -> None:
    import pytest

    from edgefleet.sdk import ConfigError

    gate = shadow_gate(agent_gate(agent_pb2.ApplyModel(shadow=agent_pb2.ShadowGate(min_f1=0.5, phase="both"))))
    assert gate is not None and gate.phase == "both"
    with pytest.raises(ConfigError, match="shadow: phase: "):
        shadow_gate(agent_gate(agent_pb2.ApplyModel(shadow=agent_pb2.ShadowGate(min_f1=0.5, phase="later"))))
