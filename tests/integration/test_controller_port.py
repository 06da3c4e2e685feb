"""One controller per port: a second ``edgefleet controller serve`` on a port another process listens on
says so in one line and exits non-zero, and the first one keeps serving alone (before, gRPC's default
SO_REUSEPORT let both listen and ``models ls`` alternated between two registries)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from edgefleet.cloud import FleetClient
from tests.integration.test_control_plane import EDGEFLEET, Proc, free_port, wait_for

pytestmark = [pytest.mark.integration]


def _serve(tmp_path: Path, name: str, port: int) -> list[str]:
    return [
        EDGEFLEET, "controller", "serve", "--insecure", "--allow-unsigned", "--listen", f"127.0.0.1:{port}",
        "--db", f"sqlite:///{tmp_path / name / 'controller.db'}", "--data-dir", str(tmp_path / name),
    ]  # fmt: skip


def test_second_controller_on_a_port_in_use_refuses_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    first = Proc(_serve(tmp_path, "one", port), tmp_path / "one.log").start()
    try:
        wait_for("the first controller", lambda: "listening on port" in first.text(), 30)
        second = subprocess.run(_serve(tmp_path, "two", port), capture_output=True, text=True, timeout=20, check=False)
        assert second.returncode != 0, second.stdout + second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip() and " WARNING " not in line]
        assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0], second.stderr
        assert "Traceback" not in second.stderr
        with FleetClient(f"127.0.0.1:{port}") as fleet:
            assert fleet.list_models() == []  # the first one still answers
    finally:
        first.kill()


def test_controller_refuses_a_port_a_plain_listener_holds(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # what gRPC sets: the kernel would share it
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = subprocess.run(_serve(tmp_path, "c", port), capture_output=True, text=True, timeout=20, check=False)
    assert res.returncode != 0 and "in use" in res.stderr, res.stderr
