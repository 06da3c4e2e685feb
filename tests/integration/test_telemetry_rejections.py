"""Rejected telemetry is counted by reason and visible where an operator looks: the controller's
``/metrics``, ``edgefleet telemetry show``, and one WARNING line per device and reason per minute in the
controller's log. A real controller process ingests from a real Mosquitto; the bad messages come from
``mosquitto_pub``."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.telemetry_broker import Mosquitto, free_port
from tests.integration.test_control_plane import EDGEFLEET, Proc, wait_for
from tests.integration.test_telemetry_mqtt import mosquitto_pub

pytestmark = [pytest.mark.integration]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    try:
        m = Mosquitto(tmp_path / "broker")
    except FileNotFoundError:
        pytest.skip("mosquitto is not installed")
    m.start()
    yield m
    m.stop()


def _metrics(port: int) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        m = re.match(r"^(edgefleet_telemetry_\w+(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def _warned(log: str) -> list[tuple[str, str]]:
    """(device, reason) of each WARNING line about a rejection."""
    out = []
    for line in log.splitlines():
        m = re.search(r"Z WARNING .*telemetry from (\S+) rejected \((\w+)\)", line)  # after the timestamp
        if m:
            out.append((m.group(1), m.group(2)))
    return sorted(out)


def test_rejections_are_counted_by_reason_and_warned_once_per_device_and_reason(
    broker: Mosquitto, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'controller.db'}"
    metrics_port = free_port()
    ctl = Proc(
        [
            EDGEFLEET, "controller", "serve", "--insecure", "--allow-unsigned", "--listen", f"127.0.0.1:{free_port()}",
            "--db", db, "--data-dir", str(tmp_path / "data"), "--mqtt", broker.url,
            "--metrics-listen", f"127.0.0.1:{metrics_port}",
        ],
        tmp_path / "controller.log",
    ).start()  # fmt: skip
    try:
        wait_for("the ingest subscription", lambda: "telemetry ingest connected" in ctl.text(), 30)
        topic = "edgefleet/v1/itest/cam-bad/telemetry"
        header = {"deviceId": "cam-bad", "fleet": "itest", "sequence": "7"}
        for _ in range(3):
            mosquitto_pub(broker.port, topic, b"{not json")  # malformed, three times: one warning
        mosquitto_pub(broker.port, topic, b"{" + b" " * (300 * 1024) + b"}")  # oversized (> 256 KiB)
        for n in range(2):
            mosquitto_pub(broker.port, topic, json.dumps({"header": header, f"bogus{n}": 1}).encode())  # schema
        mosquitto_pub(broker.port, topic, json.dumps({"header": {**header, "deviceId": "cam-other"}}).encode())
        mosquitto_pub(broker.port, "edgefleet/v1/itest/cam-worse/events", b"\xff\xfe")  # another device, malformed

        expected = [
            ("itest/cam-bad", "malformed"),
            ("itest/cam-bad", "oversized"),
            ("itest/cam-bad", "schema"),
            ("itest/cam-bad", "wrong_device"),
            ("itest/cam-worse", "malformed"),
        ]
        wait_for("one warning per device and reason", lambda: _warned(ctl.text()) == expected, 20)
        want = {"malformed": 4, "oversized": 1, "schema": 2, "wrong_device": 1}

        def counted() -> bool:
            m = _metrics(metrics_port)
            return all(m.get(f'edgefleet_telemetry_rejected_total{{reason="{r}"}}') == n for r, n in want.items())

        wait_for("the rejections on /metrics", counted, 20)
        m = _metrics(metrics_port)
        assert m["edgefleet_telemetry_received_total"] == 8
        assert m.get("edgefleet_telemetry_stored_total") == 0
        assert _warned(ctl.text()) == expected  # the repeated ones did not warn again
        stored = {"malformed": 3, "oversized": 1, "schema": 2, "wrong_device": 1}

        def shown() -> dict[str, Any]:
            res = subprocess.run(
                [EDGEFLEET, "telemetry", "show", "cam-bad", "--db", db, "--json"],
                capture_output=True,
                check=False,
                text=True,
                timeout=30,
            )
            assert res.returncode == 0, res.stderr
            return dict(json.loads(res.stdout)["rejected"])

        # the counts reach the database within a second or so (written at most once a second)
        wait_for("the counts in the database", lambda: {r: v["count"] for r, v in shown().items()} == stored, 10)
        rejected = shown()
        assert "cam-other" in rejected["wrong_device"]["last_detail"]
        text = subprocess.run(
            [EDGEFLEET, "telemetry", "show", "cam-bad", "--db", db],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
        assert "rejected" in text and "malformed 3" in text
    finally:
        ctl.kill()
