"""Telemetry wired end to end: a controller process with ``--mqtt`` and an agent process with a
``telemetry:`` section, through a real Mosquitto on a free loopback port; SQLite and PostgreSQL.

The controller's status interval is set far beyond the test's length, so after a swap the rollout gate
only has MQTT telemetry to go on: success and failure below prove the gate reads it.
"""

from __future__ import annotations

import functools
import json
import signal
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from edgefleet.sdk import generate_signing_key
from tests.integration.telemetry_broker import Mosquitto
from tests.integration.test_control_plane import EDGEFLEET, Fleet, Proc, postgres_db, wait_for
from tests.support.onnx_models import yolo_package

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    try:
        m = Mosquitto(tmp_path_factory.mktemp("mosquitto"))
    except FileNotFoundError:
        pytest.skip("mosquitto is not installed")
    m.start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("material")
    generate_signing_key(d / "a.pem", d / "a.pub.pem")
    generate_signing_key(d / "b.pem", d / "b.pub.pem")
    out = {"a": d / "a.pem", "a_pub": d / "a.pub.pem", "b": d / "b.pem", "b_pub": d / "b.pub.pem"}
    for v in ("1.0.0", "2.0.0", "3.0.0"):
        out[v] = yolo_package(d / v, version=v)
    return out


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/controller.db"
    else:
        with postgres_db() as url:
            yield url


@functools.cache
def _insecure_flag() -> tuple[str, ...]:
    """Plain-text gRPC needs ``--insecure`` where the controller supports TLS; harmless elsewhere."""
    out = subprocess.run(
        [EDGEFLEET, "controller", "serve", "--help"], capture_output=True, text=True, check=False
    ).stdout
    return ("--insecure",) if "--insecure" in out else ()


def cli_json(*args: str) -> Any:
    out = subprocess.run([EDGEFLEET, *args, "--json"], capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def device_json(address: str, device_id: str) -> dict[str, Any]:
    rows = cli_json("devices", "ls", "--controller", address)
    return next((d for d in rows if d["device_id"] == device_id), {})


def swap_events(store: Any, device_id: str) -> list[dict[str, Any]]:
    rows = store.recent(device_id, timedelta(minutes=10), kind="events")
    return [r["message"]["swap"] for r in rows if "swap" in r["message"]]


def test_telemetry_reaches_the_controller_and_gates_rollouts(
    db_url: str, broker: Mosquitto, material: dict[str, Path], tmp_path: Path
) -> None:
    from edgefleet.cloud._db import create_engine
    from edgefleet.cloud._telemetry import TelemetryStore

    fleet = Fleet(tmp_path, material, db_url)
    store_engine = None
    try:
        # One fleet per variant: the broker keeps the last variant's controller session (shared
        # subscription, session expiry 1 h), which would take its share of this fleet's messages.
        fleet_name = f"lab-{db_url.split(':', 1)[0]}"
        fleet.start_controller(
            *_insecure_flag(),
            "--mqtt",
            broker.url,
            "--fleet",
            fleet_name,
            "--status-interval",
            "300",
            "--stale",
            "600",
        )
        telemetry = {"broker": broker.url, "fleet": fleet_name, "interval_s": 0.5, "events": {"max_per_s": 5}}
        cfg = fleet.agent_config("a1", {"site": "x"}, material["1.0.0"], telemetry=telemetry)
        agent = Proc([EDGEFLEET, "agent", "--config", str(cfg), "--log-format", "json"], tmp_path / "a1.log")
        fleet.agents["a1"] = agent.start()
        fleet.wait_online("a1")

        # the device's telemetry reaches the controller: `devices ls` shows its fps and model version
        def telemetry_shown() -> dict[str, Any]:
            t = device_json(fleet.address, "a1").get("telemetry", {})
            ok = t.get("online") and t.get("fps", 0) > 0 and "toy-yolo:1.0.0" in t.get("models", [])
            return t if ok else {}

        t = wait_for("telemetry in devices ls", telemetry_shown, 30, 0.5)
        assert t["fleet"] == fleet_name
        store_engine = create_engine(db_url)
        store = TelemetryStore(store_engine, create=False)
        assert store.sequences("a1", "telemetry")
        # the logs are JSON lines
        first = next(line for line in agent.text().splitlines() if line.startswith("{"))
        assert json.loads(first)["service"] == "edgefleet-agent"

        # telemetry says fps is below --min-fps (synthetic camera at 10 fps): the wave rolls back
        fleet.client.push(material["2.0.0"], key=material["a"])
        ro = fleet.client.deploy("toy-yolo:2.0.0", {"site": "x"}, ["100%"], health_window_s=5, min_fps=50)
        failed = fleet.wait_rollout(ro.rollout_id, ("aborted",), 40)
        assert "telemetry:" in failed.message and "fps < 50" in failed.message, failed
        wait_for("a1 back on 1.0.0", lambda: fleet.serving("a1") == {"toy-yolo:1.0.0"}, 30)

        # every step of that swap is a swap event, tagged with the rollout
        def phases() -> dict[str, dict[str, Any]]:
            return {e["phase"]: e for e in swap_events(store, "a1") if e.get("rolloutId") == ro.rollout_id}

        want = {"PHASE_STARTED", "PHASE_SUCCEEDED", "PHASE_ROLLED_BACK"}
        events = wait_for("swap events", lambda: (p := phases()).keys() >= want and p, 15)
        ok, back = events["PHASE_SUCCEEDED"], events["PHASE_ROLLED_BACK"]
        assert ok["fromVersion"] == "toy-yolo:1.0.0" and ok["toVersion"] == "toy-yolo:2.0.0"
        assert back["fromVersion"] == "toy-yolo:1.0.0" and back["toVersion"] == "toy-yolo:2.0.0"
        assert ok["pipeline"] == "cam"

        # with no status report since the swap, fresh telemetry passes the gate
        fleet.client.push(material["3.0.0"], key=material["a"])
        ro3 = fleet.client.deploy("toy-yolo:3.0.0", {"site": "x"}, ["100%"], health_window_s=1.5, min_fps=2)
        done = fleet.wait_rollout(ro3.rollout_id, ("completed", "aborted"), 40)
        assert done.state == "completed" and done.devices[0].state == "succeeded", done
        wait_for(
            "3.0.0 in devices ls",
            lambda: "toy-yolo:3.0.0" in device_json(fleet.address, "a1").get("telemetry", {}).get("models", []),
            15,
            0.5,
        )
        shown = cli_json("telemetry", "show", "a1", "--since", "5m", "--db", db_url)
        assert shown["health"]["samples"] > 0 and shown["health"]["fps"] > 0
        assert {"pipeline": "cam", "name": "toy-yolo", "version": "3.0.0"} in shown["models"]
        tail_args = ["tail", "a1", "--broker", broker.url, "--kind", "telemetry", "--count", "1"]
        tail_args += ["--timeout", "10"]
        tail = subprocess.run(
            [EDGEFLEET, "telemetry", *tail_args, "--json"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert tail.returncode == 0 and "toy-yolo:3.0.0" in tail.stdout, tail.stderr

        # a message under a1's name that is not telemetry: `devices show` counts it by reason
        subprocess.run(
            ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(broker.port), "-V", "mqttv5", "-q", "1",
             "-t", f"edgefleet/v1/{fleet_name}/a1/telemetry", "-m", "{not json"],
            check=True, timeout=10,
        )  # fmt: skip
        rejected = wait_for(
            "the rejection in devices show",
            lambda: cli_json("devices", "show", "a1", "--controller", fleet.address)["telemetry"].get("rejected"),
            15,
            0.5,
        )
        assert rejected == {"malformed": "1"}  # uint64 in protobuf's JSON mapping: a string
        shown = cli_json("devices", "show", "a1", "--controller", fleet.address)["telemetry"]
        assert int(shown["acknowledged_seq"]) > 0  # the agent's messages are acknowledged
    finally:
        for a in fleet.agents.values():
            a.kill(signal.SIGTERM)
        if fleet.controller is not None:
            fleet.controller.kill(signal.SIGTERM)
        fleet.client.close()
        if store_engine is not None:
            store_engine.dispose()
