"""A real Prometheus (Debian's ``prometheus``) on loopback scrapes a real agent and a real controller; every
alert expression of tools/prometheus/edgefleet-alerts.yml and every dashboard query of
tools/grafana/edgefleet-dashboard.json is evaluated against the real series.

The agent runs one camera that does not answer (a closed port), so its device is "down"; a rollout to it
fails its camera gate and is rolled back: the device-down, camera-down and rollout-aborted alerts must see
it. Both /metrics pass ``promtool check metrics`` (the agent's used to fail; the controller had none)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.rtsp_server import free_port as free_rtsp_port
from tests.integration.telemetry_broker import Mosquitto
from tests.integration.test_control_plane import EDGEFLEET, Fleet, free_port, keys, packages, wait_for
from tests.integration.test_telemetry_wiring import broker
from tests.support.promtool import PROMTOOL, SKIP_REASON, check_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["broker", "keys", "packages"]  # fixtures, imported for pytest

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "tools" / "prometheus" / "edgefleet-alerts.yml"
DASHBOARD = REPO / "tools" / "grafana" / "edgefleet-dashboard.json"
PROMETHEUS = shutil.which("prometheus")
_NAME = re.compile(r"\b(edgefleet_[a-z0-9_]+)")


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=10).read().decode()


class Prometheus:
    def __init__(self, root: Path, targets: dict[str, str]) -> None:
        self.port = free_port()
        self.root = root
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [t]}]} for job, t in targets.items()],
        }
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = (root / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for("prometheus ready", lambda: _get(f"{self.url}/-/ready"), 30)
        except AssertionError:
            self.close()
            raise AssertionError((root / "prometheus.log").read_text()[-3000:]) from None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = json.loads(_get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def rules(self) -> dict[str, dict[str, Any]]:
        body = json.loads(_get(f"{self.url}/api/v1/rules"))
        return {r["name"]: r for g in body["data"]["groups"] for r in g["rules"]}

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture
def prometheus_needed() -> Iterator[None]:
    if PROMETHEUS is None or PROMTOOL is None:
        pytest.skip(SKIP_REASON)
    yield


def test_promtool_checks_the_alert_rules() -> None:
    if PROMTOOL is None:
        pytest.skip(SKIP_REASON)
    cmd = [PROMTOOL, "check", "rules", str(RULES)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_real_prometheus_scrapes_agent_and_controller_and_evaluates_every_alert(
    prometheus_needed: None,
    broker: Mosquitto,
    keys: dict[str, Path],
    packages: dict[str, Path],
    tmp_path: Path,
) -> None:
    fleet = Fleet(tmp_path, keys, f"sqlite:///{tmp_path}/controller.db")
    prom: Prometheus | None = None
    controller_metrics, agent_metrics = free_port(), free_port()
    try:
        fleet.start_controller(
            "--metrics-listen", f"127.0.0.1:{controller_metrics}", "--camera-grace", "1", "--mqtt", broker.url
        )
        v1 = packages["1.0.0"]
        dead = f"door=rtsp://127.0.0.1:{free_rtsp_port()}/stream#open_timeout_ms=1000"
        telemetry = {"broker": broker.url, "fleet": "prom", "interval_s": 0.5, "prometheus_port": agent_metrics}
        fleet.start_agent(
            "p1",
            {"site": "p"},
            v1,
            telemetry=telemetry,
            pipelines={"cam": {"model": str(v1), "sources": [dead, "yard=synthetic:?fps=5&width=160&height=120"]}},
        )
        fleet.wait_online("p1")
        wait_for("p1 degraded", lambda: fleet.device("p1").health_state == "degraded", 40)
        # the same camera states through MQTT: the newest telemetry message, in `devices show`
        tel = wait_for("telemetry cameras", lambda: {c.stream_id: c for c in fleet.device("p1").telemetry.cameras}, 40)
        assert (tel["door"].state, tel["door"].reason, tel["yard"].state) == ("reconnecting", "refused", "streaming")
        shown = subprocess.run(
            [EDGEFLEET, "devices", "show", "p1", "--controller", fleet.address],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "COLUMNS": "250"},
        ).stdout
        assert "cameras (telemetry)" in shown and "door reconnecting (refused)" in shown, shown
        targets = {"agent": f"127.0.0.1:{agent_metrics}", "controller": f"127.0.0.1:{controller_metrics}"}
        prom = Prometheus(tmp_path, targets)
        wait_for("both targets scraped", lambda: len(prom.query("up == 1")) == 2, 30)
        wait_for(
            "no rollout yet, scraped", lambda: prom.query('edgefleet_controller_rollouts{state="aborted"} == 0'), 30
        )
        fleet.client.push(packages["2.0.0"], key=keys["a"])
        ro = fleet.client.deploy("toy-yolo:2.0.0", {"site": "p"}, ["100%"], health_window_s=3)
        fleet.wait_rollout(ro.rollout_id, ("aborted", "rolled_back"), 60)

        agent_url = f"http://127.0.0.1:{agent_metrics}/metrics"
        controller_url = f"http://127.0.0.1:{controller_metrics}/metrics"
        agent_text = check_metrics(wait_for("agent metrics", lambda: _get(agent_url), 30))
        controller_text = check_metrics(_get(controller_url))
        assert 'edgefleet_stream_state{pipeline="cam",state="reconnecting",stream="door"} 1.0' in agent_text
        assert 'edgefleet_stream_reason{pipeline="cam",reason="refused",stream="door"} 1.0' in agent_text
        assert (
            'edgefleet_controller_rpc_requests_total{code="OK",method="CreateRollout",service="FleetService"} 1.0'
            in (controller_text)
        )
        assert 'edgefleet_controller_rollouts{state="aborted"} 1.0' in controller_text
        assert 'edgefleet_device_cameras_not_streaming{device="p1"} 1.0' in controller_text
        # the gate that failed p1, kept through the wave's rollback
        failed = f'edgefleet_rollout_member_gate_failed{{device="p1",gate="cameras",rollout="{ro.rollout_id}"}} 1.0'
        assert failed in controller_text, controller_text
        assert "edgefleet_controller_db_call_duration_seconds_bucket" in controller_text

        wait_for("telemetry rows", lambda: prom.query("edgefleet_device_telemetry_age_seconds"), 30)
        # a camera broken for longer than the grace makes p1 degraded: it must read as up=1 with 1 camera down
        alerts = yaml.safe_load(RULES.read_text())
        exprs = {r["alert"]: r["expr"] for g in alerts["groups"] for r in g["rules"]}
        for name, expr in exprs.items():
            prom.query(expr)  # evaluates without error
            for metric in set(_NAME.findall(expr)):
                base = re.sub(r"_(bucket|count|sum)$", "", metric) if metric.endswith("_bucket") else metric
                assert prom.query(f"count({metric})") or prom.query(f"count({base}_count)"), (name, metric)
        # the scenario's alerts see it: the camera and the rollout now (pending: their `for` has not run out)
        wait_for(
            "camera-down pending", lambda: prom.rules()["EdgefleetCameraDown"]["state"] in ("pending", "firing"), 30
        )
        firing = prom.query(exprs["EdgefleetCameraDown"])
        assert {(r["metric"]["stream"], r["metric"]["state"]) for r in firing} == {("door", "reconnecting")}
        wait_for("rollout-aborted firing", lambda: prom.rules()["EdgefleetRolloutAborted"]["state"] == "firing", 30)
        degraded = prom.query(exprs["EdgefleetDeviceDegraded"])
        assert [r["metric"]["device"] for r in degraded] == ["p1"]
        assert prom.query(exprs["EdgefleetDeviceDown"]) == []  # yard streams: degraded, not down
        # every dashboard query evaluates, with its variables set to "all"
        dashboard = json.loads(DASHBOARD.read_text())
        queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        assert len(queries) >= 20
        for q in queries:
            prom.query(q.replace("$device", ".*").replace("$instance", ".*"))
        assert prom.query('edgefleet_device_info{device="p1",fleet="prom"}')
    finally:
        if prom is not None:
            prom.close()
        fleet.close()
