"""The agent SIGKILLed at random points of download, verify, install, swap and the health window, many
times in a row, against a real controller: the model store is never corrupt, and the agent always
restarts on a version that verifies. tools/bench/random_kill.py runs the same harness for 200+ kills."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.random_kill import RandomKill

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_random_kills_never_corrupt_the_store(tmp_path: Path) -> None:
    rk = RandomKill(tmp_path, seed=20240607, versions=3, padding_bytes=2_000_000, rate_limit_kbps=24000.0)
    try:
        out = rk.run(kills=10)
    finally:
        rk.close()
    assert out["failures"] == [], out
    assert out["kills"] == 10
    assert out["restarts"] == out["restarts_on_verified_version"] == 11  # the first start, then one a kill
    assert out["store_integrity_checks"] == out["store_integrity_ok"] == 10
    assert out["staging_leftovers_after_restart"] == 0
    # the kills landed in the update itself, not only while the agent idled
    assert sum(n for phase, n in out["kills_by_phase"].items() if not phase.startswith("none")) >= 7, out
