"""The agent (``edgefleet agent``, a real process) runs pipelines made of an installed plugin's parts with
no code change — the example plugin's source, backend, decoder, analytics stage and sink — and its own
``events`` sink, which registers through the same seam from edgefleet-edge's entry point, publishes a
detection pipeline's events to a real Mosquitto on a free loopback port."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.telemetry_broker import Mosquitto, free_port
from tests.support.onnx_models import yolo_package
from tests.unit.sdk.test_plugin_entry_points import R1, R2, csv_labels, plugin_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    try:
        m = Mosquitto(tmp_path / "mosquitto")
    except FileNotFoundError:
        pytest.skip("mosquitto is not installed")
    m.start()
    yield m
    m.stop()


def _subscribe(port: int, topic: str) -> tuple[Any, list[dict[str, Any]]]:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    got: list[dict[str, Any]] = []
    ready = threading.Event()
    c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    c.on_connect = lambda client, *_: (client.subscribe(topic, qos=1), ready.set())
    c.on_message = lambda _c, _u, m: got.append(json.loads(m.payload))
    c.connect("127.0.0.1", port)
    c.loop_start()
    assert ready.wait(10), "no connection to the test broker"
    return c, got


def _wait(what: str, predicate: Any, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; agent log:\n{log.read_text(errors='replace')[-3000:]}")


def test_the_agent_runs_a_plugins_parts_and_publishes_through_its_events_sink(
    tmp_path: Path, broker: Mosquitto
) -> None:
    out = tmp_path / "out.csv"
    config = {
        "device_id": "plug-1",
        "controller": {"address": f"127.0.0.1:{free_port()}", "backoff_initial_s": 0.5, "backoff_max_s": 1.0},
        "require_signature": False,
        "state_dir": str(tmp_path / "state"),
        "telemetry": {"broker": broker.url, "fleet": "plug", "interval_s": 0.5, "events": {"max_per_s": 50}},
        "pipelines": {
            "brightness": plugin_pipeline(tmp_path, out),
            "det": {
                "model": str(yolo_package(tmp_path / "yolo")),
                "sources": ["synthetic:?width=64&height=48&fps=20&frames=40"],
            },
        },
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    client, events = _subscribe(broker.port, "edgefleet/v1/plug/plug-1/events")
    log = tmp_path / "agent.log"
    with log.open("wb") as f:
        proc = subprocess.Popen([EDGEFLEET, "agent", "--config", str(path)], stdout=f, stderr=subprocess.STDOUT)
    try:
        _wait(
            "the plugin pipeline's 9 rows",
            lambda: out.exists() and len(out.read_text().splitlines()) == 10,
            60,
            proc,
            log,
        )
        detections = lambda: [e["detections"] for e in events if "detections" in e]  # noqa: E731
        _wait("detection events", detections, 60, proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        finally:
            if proc.poll() is None:
                proc.kill()
            client.loop_stop()
            client.disconnect()
    assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
    assert csv_labels(out) == {"r1": R1, "r2": R2}
    assert {row.split(",")[0] for row in out.read_text().splitlines()[1:]} == {"brightness"}  # the pipeline's name
    first = detections()[0]
    assert first["pipeline"] == "det" and first["detections"], first
    assert first["modelVersion"] == "toy-yolo:1.0.0"
