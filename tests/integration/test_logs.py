"""Logs of the long-running commands as an operator reads them: UTC timestamps in text, ``--log-format
json`` on the controller as on the agent, the device id on every agent line and the pipeline and stream on
a camera's lines, the camera's password never (it used to be: no timestamps, no JSON on the controller)."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from tests.integration.rtsp_server import free_port as free_rtsp_port
from tests.integration.test_control_plane import EDGEFLEET, Fleet, Proc, keys, packages, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["keys", "packages"]  # fixtures, imported for pytest

PASSWORD = "l0g-pa55"
_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) ")


def _agent(fleet: Fleet, tmp_path: Path, device: str, model: Path, *flags: str) -> Proc:
    dead = f"door=rtsp://viewer:{PASSWORD}@127.0.0.1:{free_rtsp_port()}/stream#open_timeout_ms=500"
    cfg = fleet.agent_config(
        device, {"site": "logs"}, model, pipelines={"cam": {"model": str(model), "sources": [dead]}}
    )
    proc = Proc([EDGEFLEET, "agent", "--config", str(cfg), *flags], tmp_path / f"{device}.log").start()
    fleet.agents[device] = proc
    return proc


def test_agent_and_controller_logs_carry_time_device_stream_and_no_secret(
    tmp_path: Path, keys: dict[str, Path], packages: dict[str, Path]
) -> None:
    fleet = Fleet(tmp_path, keys, f"sqlite:///{tmp_path}/controller.db")
    try:
        fleet.start_controller("--log-format", "json")
        v1 = packages["1.0.0"]
        text = _agent(fleet, tmp_path, "log-text", v1)
        js = _agent(fleet, tmp_path, "log-json", v1, "--log-format", "json")
        wait_for("text agent's camera warning", lambda: "stream cannot be opened" in text.text(), 40)
        wait_for("json agent's camera warning", lambda: "stream cannot be opened" in js.text(), 40)
        wait_for("both connected", lambda: "connected to controller" in text.text() + js.text(), 40)
        text.kill(signal.SIGTERM)
        js.kill(signal.SIGTERM)
        if fleet.controller is not None:
            fleet.controller.kill(signal.SIGTERM)
            fleet.controller = None

        lines = [line for line in text.text().splitlines() if line.strip()]
        log_lines = [line for line in lines if _TS.match(line)]
        assert log_lines and len(log_lines) >= len(lines) - 1, lines  # every line is a log line (one banner at most)
        assert all("device=log-text" in line for line in log_lines), log_lines
        camera = [line for line in log_lines if "stream cannot be opened" in line]
        assert camera and all("[device=log-text pipeline=cam stream=door]" in line for line in camera), camera
        assert "viewer:***@" in camera[0]

        records = [json.loads(line) for line in js.text().splitlines() if line.startswith("{")]
        assert records and all(r["device"] == "log-json" and r["service"] == "edgefleet-agent" for r in records)
        warned = [r for r in records if "stream cannot be opened" in r["msg"]]
        assert warned and warned[0]["pipeline"] == "cam" and warned[0]["stream"] == "door"
        assert warned[0]["ts"].endswith("Z") and warned[0]["level"] == "warning"

        controller = (tmp_path / "controller.log").read_text()
        c_records = [json.loads(line) for line in controller.splitlines() if line.startswith("{")]
        assert any("listening on" in r["msg"] for r in c_records), controller[-2000:]
        assert all(r["service"] == "edgefleet-controller" and r["ts"].endswith("Z") for r in c_records)
        everything = text.text() + js.text() + controller
        assert PASSWORD not in everything
    finally:
        fleet.close()
