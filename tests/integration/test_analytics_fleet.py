"""Video analytics reach the fleet: an agent process running NanoDet-m on the committed clip with
``analytics: [track, zones]``, a controller process ingesting its MQTT telemetry through a real
Mosquitto; line crossings arrive as events with the model version and track id, zone and line counts in
the periodic telemetry, Prometheus series on the agent, and `edgefleet telemetry show` summarises them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.telemetry_broker import Mosquitto
from tests.integration.test_control_plane import EDGEFLEET, Fleet, Proc, free_port, keys, wait_for
from tests.integration.test_telemetry_wiring import broker
from tests.support import track_swap

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["broker", "keys"]  # fixtures, imported for pytest

ZONES = {
    "type": "zones",
    "window_s": 30,
    "zones": [{"name": "road", "points": [[0, 190], [768, 190], [768, 330], [0, 300]]}],
    "lines": [{"name": "gate", "points": [[384, 150], [384, 400]], "classes": ["person"]}],
}


def _show(db: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EDGEFLEET, "telemetry", "show", "cam-a", "--since", "10m", "--db", db, *extra],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "COLUMNS": "160"},
    )


def test_zone_and_line_counts_and_events_reach_the_controller(
    broker: Mosquitto, keys: dict[str, Path], tmp_path: Path
) -> None:
    from edgefleet.cloud._db import create_engine
    from edgefleet.cloud._telemetry import TelemetryStore

    db = f"sqlite:///{tmp_path}/controller.db"
    fleet = Fleet(tmp_path, keys, db)
    engine = None
    try:
        fleet.start_controller("--mqtt", broker.url, "--fleet", "analytics", "--status-interval", "300")
        metrics_port = free_port()
        telemetry = {
            "broker": broker.url,
            "fleet": "analytics",
            "interval_s": 0.5,
            "events": {"detections": False, "analytics": {"max_per_s": 50, "burst": 50}},
            "prometheus_port": metrics_port,
        }
        cfg = fleet.agent_config("cam-a", {"site": "x"}, track_swap.V1, telemetry=telemetry, require_signature=False)
        agent_yaml = yaml.safe_load(cfg.read_text())
        agent_yaml["pipelines"]["cam"].update(
            sources=[f"lobby={track_swap.CLIP}?loop=1"],
            score_threshold=track_swap.SCORE_THRESHOLD,
            analytics=[track_swap.TRACK, ZONES],
        )
        cfg.write_text(json.dumps(agent_yaml))
        fleet.agents["cam-a"] = Proc([EDGEFLEET, "agent", "--config", str(cfg)], tmp_path / "cam-a.log").start()

        engine = create_engine(db)
        store = TelemetryStore(engine, create=False)

        def crossings() -> list[dict[str, Any]]:
            rows = store.recent("cam-a", timedelta(minutes=10), kind="events")
            got = [r["message"]["analytics"] for r in rows if "analytics" in r["message"]]
            return [a for a in got if a.get("kind") == "KIND_LINE_CROSS"]

        events = wait_for("line crossing events", crossings, 90, 0.5)
        ev = events[0]
        assert ev["region"] == "gate" and ev["label"] == "person" and ev["direction"] in ("in", "out")
        assert int(ev["trackId"]) >= 1 and ev["modelVersion"] == "nanodet-m:1.0.0" and ev["streamId"] == "lobby"

        def counted() -> dict[str, Any]:
            out = _show(db, "--json")
            if out.returncode != 0:
                return {}
            regions = json.loads(out.stdout)["analytics"]["regions"]
            gate = [r for r in regions if r["name"] == "gate"]
            return {"regions": regions} if gate and gate[0]["in_total"] + gate[0]["out_total"] >= 1 else {}

        shown = wait_for("counts in telemetry show", counted, 30, 0.5)["regions"]
        assert {(r["stream"], r["name"], r["kind"]) for r in shown} == {
            ("lobby", "road", "zone"),
            ("lobby", "gate", "line"),
        }

        text = _show(db)
        assert text.returncode == 0, text.stderr
        for words in ("zones and lines", "gate (line)", "road (zone)", "analytics events", "cross", "track"):
            assert words in text.stdout, text.stdout

        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert 'edgefleet_line_crossings_total{class="person",direction=' in page
        assert 'edgefleet_zone_objects{class="person",pipeline="cam",stream="lobby",zone="road"}' in page
        assert 'edgefleet_analytics_value{name="tracks_active",pipeline="cam",stage="track"}' in page
    finally:
        for a in fleet.agents.values():
            a.kill(signal.SIGTERM)
        if fleet.controller is not None:
            fleet.controller.kill(signal.SIGTERM)
        fleet.client.close()
        if engine is not None:
            engine.dispose()
