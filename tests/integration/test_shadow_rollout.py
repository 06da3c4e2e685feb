"""Rollouts gated on what the candidate sees (issue 22), end to end: a real controller and three real
agents serving NanoDet-m 1.0.0 on the committed clip (looped, paced at its 10 fps), candidates pushed
signed, deployed with shadow gates. Each device runs the candidate in shadow before its cut-over.

* 2.0.1, label names rotated, waves 1 → 100 %: the wave-1 device refuses it at the shadow gate with the
  KPI in its message, the rollout aborts, wave 2 never starts (its devices stay pending, never commanded);
* 2.0.2, a threshold that sees nothing, one wave over all three: every device refuses it;
* 2.0.0 (320 px, 6 classes) passes on every device and the rollout completes.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgefleet.sdk import generate_signing_key
from tests.integration.test_control_plane import Fleet, wait_for
from tests.support.shadow_models import V1, blind, build_v2, shuffled
from tests.support.track_swap import CLIP

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GATES = {
    "min_shadow_f1": 0.7,
    "max_class_mix_shift": 0.2,
    "max_detection_rate_change": 0.5,
    "shadow_sample_rate": 0.5,
    "shadow_min_frames": 10,
    "shadow_max_s": 60.0,
}
DEVICES = ("d1", "d2", "d3")


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    keys = {"a": tmp_path / "a.pem", "a_pub": tmp_path / "a.pub.pem", "b_pub": tmp_path / "a.pub.pem"}
    generate_signing_key(keys["a"], keys["a_pub"])
    f = Fleet(tmp_path, keys, f"sqlite:///{tmp_path}/controller.db")
    try:
        yield f
    finally:
        f.close()


def _start(fleet: Fleet) -> None:
    fleet.start_controller()
    for d in DEVICES:
        cfg = fleet.agent_config(d, {"site": "s"}, V1)
        text = cfg.read_text().replace("synthetic:?width=160&height=120&fps=10", f"{CLIP}?loop=1&realtime=1")
        cfg.write_text(text)
        from tests.integration.test_control_plane import EDGEFLEET, Proc

        fleet.agents[d] = Proc([EDGEFLEET, "agent", "--config", str(cfg)], fleet.root / f"{d}.log").start()
    fleet.wait_online(*DEVICES, timeout=90)


def _states(ro: object) -> dict[str, tuple[int, str, str]]:
    return {m.device_id: (m.wave, m.state, m.message) for m in ro.devices}  # type: ignore[attr-defined]


def test_shadow_gates_abort_sabotaged_versions_in_wave_one_and_let_a_good_one_through(
    fleet: Fleet, tmp_path: Path
) -> None:
    v2 = build_v2(tmp_path / "v2")
    bad_labels, sees_nothing = shuffled(v2, tmp_path / "shuffled"), blind(v2, tmp_path / "blind")
    _start(fleet)
    for pkg in (v2, bad_labels, sees_nothing):
        fleet.client.push(pkg, key=fleet.keys["a"])

    ro = fleet.client.deploy("nanodet-m:2.0.1", {"site": "s"}, ["1", "100%"], health_window_s=1, shadow=GATES)
    assert ro.min_shadow_f1 == 0.7 and ro.shadow_min_frames == 10
    done = fleet.wait_rollout(ro.rollout_id, ("aborted",), 120)
    states = _states(done)
    (first,) = [d for d, (wave, _, _) in states.items() if wave == 0]
    _, state, message = states[first]
    assert state == "failed" and "refused at shadow" in message and "shadow_f1" in message, states
    assert "min_shadow_f1 0.7" in message and "shadow_class_mix_shift" in message
    assert "wave 1" in done.message
    for d, (wave, st, _) in states.items():
        if d != first:
            assert (wave, st) == (1, "pending"), states  # wave 2 never started: left pending by the abort
            assert "nanodet-m:2.0.1" not in fleet.agents[d].text()  # never commanded
    for d in DEVICES:
        assert fleet.serving(d) == {"nanodet-m:1.0.0"}
    assert "STEP_CUTOVER" not in fleet.agents[first].text()  # refused before any cut-over

    ro = fleet.client.deploy("nanodet-m:2.0.2", {"site": "s"}, ["100%"], health_window_s=1, shadow=GATES)
    done = fleet.wait_rollout(ro.rollout_id, ("aborted",), 120)
    for d, (_, st, message) in _states(done).items():
        if st == "failed":
            assert "refused at shadow" in message and "shadow_f1 0.000" in message, message
    # the first refusal aborts the wave; devices still in their shadow phase then get a rollback order,
    # which waits for their apply: each refuses it at the shadow gate all the same
    for d in DEVICES:
        wait_for(f"{d} refused 2.0.2", lambda d=d: "2.0.2 refused at shadow" in fleet.agents[d].text(), 120)
    for d in DEVICES:
        assert fleet.serving(d) == {"nanodet-m:1.0.0"}

    ro = fleet.client.deploy("nanodet-m:2.0.0", {"site": "s"}, ["1", "100%"], health_window_s=1, shadow=GATES)
    done = fleet.wait_rollout(ro.rollout_id, ("completed",), 180)
    assert {st for _, st, _ in _states(done).values()} == {"succeeded"}, _states(done)
    for d in DEVICES:
        assert fleet.serving(d) == {"nanodet-m:2.0.0"}
    for d in DEVICES:
        fleet.agents[d].kill(signal.SIGTERM)
