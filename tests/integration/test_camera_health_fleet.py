"""Device health derived from its cameras, end to end: real agents with a real RTSP camera (GStreamer) and a
dead one, a real controller; ``devices show`` and a rollout's camera gate.

Reproduces the finding "a device whose only RTSP camera is unreachable shows as running, healthy yes, fps 0.0;
a rollout's health gate would pass it"."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from .rtsp_server import RtspServer, rtsp_available
from .rtsp_server import free_port as free_rtsp_port
from .test_control_plane import EDGEFLEET, Fleet, fleet_factory, keys, packages, wait_for  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        not rtsp_available(), reason="GStreamer RTSP server not installed (tools/ci/install-system-deps.sh)"
    ),
]

PASSWORD = "fl33t-pa55"


def _pipelines(*sources: str, model: Path) -> dict[str, object]:
    return {"pipelines": {"cam": {"model": str(model), "sources": list(sources)}}}


def test_dead_camera_reads_down_and_a_camera_lost_in_the_window_fails_the_gate(
    tmp_path: Path,
    fleet_factory: Callable[[str], Fleet],  # noqa: F811 - the fixture imported above
    keys: dict[str, Path],  # noqa: F811
    packages: dict[str, Path],  # noqa: F811
    clip: Path,
) -> None:
    fleet = fleet_factory(f"sqlite:///{tmp_path}/controller.db")
    fleet.start_controller("--camera-grace", "1")
    server = RtspServer(clip, user="viewer", password=PASSWORD, fps=10).start()
    try:
        v1 = packages["1.0.0"]
        door = f"door={server.url}#timeout_ms=1000&stall_s=2"
        dead = f"gate=rtsp://viewer:{PASSWORD}@127.0.0.1:{free_rtsp_port()}/stream#open_timeout_ms=1000"
        fleet.start_agent("h1", {"site": "h"}, v1, **_pipelines(door, "pattern=synthetic:?fps=5", model=v1))
        fleet.start_agent("h2", {"site": "dead"}, v1, **_pipelines(dead, model=v1))
        fleet.wait_online("h1", "h2")

        def states(d: object) -> dict[str, str]:
            return {c.stream_id: c.state for p in d.pipelines for c in p.cameras}  # type: ignore[attr-defined]

        want = {"door": "streaming", "pattern": "streaming"}
        h1 = wait_for("h1 streaming", lambda: states(d := fleet.device("h1")) == want and d, 40)
        assert h1.health_state == "ok" and not h1.health_detail
        h2 = wait_for("h2 down", lambda: (d := fleet.device("h2")).health_state == "down" and d, 40)
        assert "gate reconnecting (refused)" in h2.health_detail, h2.health_detail
        shown = subprocess.run(
            [EDGEFLEET, "devices", "show", "h2", "--controller", fleet.address],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "COLUMNS": "250"},  # one line per row
        ).stdout
        assert "down" in shown and "refused" in shown and PASSWORD not in shown, shown
        assert "healthy" in shown and "1 of 1 camera(s) not streaming" in shown, shown  # not "healthy yes"

        # the camera gate: h2's dead camera fails it at once (its swap goes through, its window does not)
        fleet.client.push(packages["2.0.0"], key=keys["a"])
        ro = fleet.client.deploy("toy-yolo:2.0.0", {"site": "dead"}, ["100%"], health_window_s=3)
        done = fleet.wait_rollout(ro.rollout_id, ("aborted", "rolled_back", "completed"), 60)
        assert done.state != "completed", done
        assert "camera not streaming: gate reconnecting (refused)" in done.message, done

        # h1: its camera goes away inside the health window; the gate fails with the camera's reason
        ro = fleet.client.deploy("toy-yolo:2.0.0", {"site": "h"}, ["100%"], health_window_s=20)
        wait_for("h1 in its window", lambda: fleet.client.rollout(ro.rollout_id).devices[0].state == "health", 60)
        server.kill()
        done = fleet.wait_rollout(ro.rollout_id, ("aborted", "rolled_back", "completed"), 60)
        assert done.state != "completed", done
        assert "camera not streaming: door" in done.message, done
        h1 = wait_for("h1 degraded", lambda: (d := fleet.device("h1")).health_state == "degraded" and d, 30)
        assert h1.health_detail.startswith("door "), h1.health_detail
        status = subprocess.run(
            [EDGEFLEET, "rollout", "status", ro.rollout_id, "--controller", fleet.address],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert "camera not streaming" in status and "every camera streaming" in status, status
    finally:
        server.stop()
