"""The agent SIGKILLed at random points of download, verify, install, swap, inside the health window
and at its end, many times in a row, against a real controller: the model store is never corrupt, the
agent always restarts on a version that verifies, and every rollout converges (completed with the device
serving the version and holding it as last-good) or ends aborted with a reason. tools/bench/random_kill.py
runs the same harness for 50+ kills."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.random_kill import RandomKill

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_random_kills_never_corrupt_the_store_and_every_rollout_converges(tmp_path: Path) -> None:
    rk = RandomKill(tmp_path, seed=20240607, versions=3, padding_bytes=2_000_000, rate_limit_kbps=24000.0)
    try:
        out = rk.run(kills=12)
    finally:
        rk.close()
    assert out["failures"] == [], out
    assert out["kills"] == 12
    assert out["restarts"] == out["restarts_on_verified_version"] == 13  # the first start, then one a kill
    assert out["store_integrity_checks"] == out["store_integrity_ok"] == 12
    assert out["staging_leftovers_after_restart"] == 0
    # the kills landed in the update itself, not only while the agent idled, and some inside the window
    assert sum(n for phase, n in out["kills_by_phase"].items() if not phase.startswith("none")) >= 8, out
    assert out["kills_in_health_window"] >= 2, out
    # convergence: never "completed" with the device on another version; every rollout ended
    assert out["rollouts_completed_not_converged"] == 0, out
    assert len(out["outcomes"]) == out["rollouts_started"], out
    assert out["rollouts_completed_and_converged"] + out["rollouts_aborted_with_reason"] == out["rollouts_started"]
    assert out["rollouts_completed_and_converged"] >= 1, out
