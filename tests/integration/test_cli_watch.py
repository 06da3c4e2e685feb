"""``edgefleet --version``, ``deploy --wait`` (its exit code says how the rollout ended), ``rollout status
--watch`` and ``devices ls --watch`` against a real controller and agents."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.rtsp_server import free_port as free_rtsp_port
from tests.integration.test_control_plane import EDGEFLEET, Fleet, keys, packages

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["keys", "packages"]  # fixtures, imported for pytest


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _connected(pid: int, address: str, timeout_s: float = 30) -> bool:
    """Whether process ``pid`` opens a TCP connection to ``address`` (its first poll) within ``timeout_s``."""
    port = int(address.rsplit(":", 1)[1])
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if any(c.raddr and c.raddr.port == port for c in psutil.Process(pid).net_connections("tcp")):
                return True
        except psutil.NoSuchProcess:  # exited already: the caller collects its output
            return False
        time.sleep(0.1)
    return False


def _ended(proc: subprocess.Popen[str], timeout_s: float) -> tuple[str, str]:
    """``proc``'s output once it exits; if it does not, its threads' stacks (faulthandler, on SIGABRT) in the
    failure, and the process killed, so one hang does not leak into the tests after it."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"still running {timeout_s:g} s after SIGINT; its stacks:\n{err[-6000:]}\n{out[-2000:]}")


def test_version_names_every_installed_member() -> None:
    out = _cli("--version")
    assert out.returncode == 0, out
    for member in ("sdk", "proto", "edge", "cloud"):
        assert f"edgefleet-{member} 0." in out.stdout


def test_deploy_wait_exit_codes_and_watch(tmp_path: Path, keys: dict[str, Path], packages: dict[str, Path]) -> None:
    fleet = Fleet(tmp_path, keys, f"sqlite:///{tmp_path}/controller.db")
    try:
        fleet.start_controller("--camera-grace", "1")
        v1 = packages["1.0.0"]
        fleet.start_agent("w1", {"site": "good"}, v1)
        dead = f"door=rtsp://127.0.0.1:{free_rtsp_port()}/x#open_timeout_ms=500"
        fleet.start_agent("w2", {"site": "bad"}, v1, pipelines={"cam": {"model": str(v1), "sources": [dead]}})
        fleet.wait_online("w1", "w2")
        for v in ("2.0.0", "3.0.0"):
            fleet.client.push(packages[v], key=keys["a"])
        c = ("--controller", fleet.address)

        good = _cli(
            "deploy", "toy-yolo:2.0.0", "--to", "site=good", "--waves", "100%", "--health-window", "1", "--wait", *c
        )
        assert good.returncode == 0, good.stdout + good.stderr
        assert "completed" in good.stdout
        bad = _cli(
            "deploy", "toy-yolo:3.0.0", "--to", "site=bad", "--waves", "100%", "--health-window", "3", "--wait", *c
        )
        assert bad.returncode == 3, bad.stdout + bad.stderr
        assert "aborted: wave 1: 1 of 1 failed (camera not streaming: door" in bad.stderr, bad.stderr
        # --watch on a rollout that has ended: its state at once, with the same exit code
        watched = _cli("rollout", "status", "--watch", *c, timeout=30)
        assert watched.returncode == 3 and "aborted" in watched.stdout, watched.stdout + watched.stderr

        proc = subprocess.Popen(
            [EDGEFLEET, "devices", "ls", "--watch", "--interval", "0.5", *c],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
        if not _connected(proc.pid, fleet.address):
            proc.send_signal(signal.SIGINT)
            _ended(proc, 20)
            pytest.fail("devices ls --watch did not poll the controller within 30 s")
        time.sleep(2)  # a few polls
        assert proc.poll() is None  # still watching
        proc.send_signal(signal.SIGINT)
        out, err = _ended(proc, 20)
        assert proc.returncode == 0, err
        assert "w1" in out and "w2" in out and "down" in out, out
        both = _cli("devices", "ls", "--watch", "--json", *c)
        assert both.returncode == 1 and "give one of them" in both.stderr
    finally:
        fleet.close()
