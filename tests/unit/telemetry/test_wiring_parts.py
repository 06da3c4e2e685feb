"""The telemetry wiring's small parts: the agent.yaml section, the rollout gate on telemetry health."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edgefleet.cloud._rollouts import telemetry_verdict
from edgefleet.cloud._telemetry import DeviceHealth
from edgefleet.edge import AgentConfigError, load_agent_config


def _write(tmp_path: Path, telemetry: dict[str, object]) -> Path:
    cfg = {
        "device_id": "cam-1",
        "state_dir": "state",
        "require_signature": False,
        "pipelines": {"p": {"model": "m", "sources": ["synthetic:"]}},
        "telemetry": telemetry,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_agent_telemetry_section_defaults(tmp_path: Path) -> None:
    cfg = load_agent_config(_write(tmp_path, {"broker": "mqtt://127.0.0.1:1883", "prometheus_port": 0}))
    t = cfg.telemetry
    assert t is not None
    assert t.device_id == "cam-1" and t.fleet == "default"
    assert t.spool_path == tmp_path / "state" / "telemetry-spool.db"
    assert t.prometheus_port is None  # 0: off in an agent config


def test_agent_telemetry_section_is_strict(tmp_path: Path) -> None:
    with pytest.raises(AgentConfigError, match=r"telemetry\.intervall_s"):
        load_agent_config(_write(tmp_path, {"intervall_s": 1}))
    with pytest.raises(AgentConfigError, match="differs from the agent's"):
        load_agent_config(_write(tmp_path, {"device_id": "cam-2"}))


def _health(fps: float | None, *, samples: int = 3, online: bool = True, errors: int = 0) -> DeviceHealth:
    return DeviceHealth(fps=fps, p95_ms=20.0, errors=errors, online=online, samples=samples, last_seen=1.0)


@pytest.mark.parametrize(
    ("health", "verdict"),
    [
        (None, None),
        (_health(None, samples=0), None),  # nothing since the swap: no opinion
        (_health(3.0, online=False), None),  # telemetry link offline: the status reports decide
        (_health(30.0), True),
        (_health(3.0), False),
        (_health(30.0, errors=1), False),
    ],
)
def test_telemetry_verdict(health: DeviceHealth | None, verdict: bool | None) -> None:
    ro = {"params": {"min_fps": 25.0, "max_latency_ms": 50.0}}
    ok, why = telemetry_verdict(ro, health)
    assert ok is verdict
    assert (why.startswith("telemetry:")) is (verdict is False)
