"""Does a broker package from the Python package index speak MQTT 5? Connects paho (MQTT 5, then 3.1.1) to
amqtt's broker on a free loopback port and prints the CONNACK reason of each as JSON.

Run it in a scratch venv, not the project's:
    python3 -m venv /tmp/amqtt-venv && /tmp/amqtt-venv/bin/pip install amqtt paho-mqtt
    /tmp/amqtt-venv/bin/python tools/devbroker/probe_broker_package.py
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connack(port: int, protocol: int) -> dict[str, str]:
    done = threading.Event()
    res: dict[str, str] = {}

    def on_connect(_c: Any, _u: Any, _f: Any, rc: Any, _p: Any = None) -> None:
        res["connack"] = str(rc)
        done.set()

    def on_disconnect(_c: Any, _u: Any, _f: Any, rc: Any, _p: Any = None) -> None:
        res.setdefault("disconnect", str(rc))
        done.set()

    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"probe-{protocol}", protocol=protocol)
    c.on_connect, c.on_disconnect = on_connect, on_disconnect
    c.connect("127.0.0.1", port, 5)
    c.loop_start()
    if not done.wait(5):
        res["connack"] = "none within 5 s"
    c.loop_stop()
    return res


def main() -> None:
    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "amqtt.yaml"
        cfg.write_text(f"listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:{port}\n")
        broker = subprocess.Popen([str(Path(sys.executable).parent / "amqtt"), "-c", str(cfg)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            time.sleep(2.5)
            out = {
                "amqtt": version("amqtt"),
                "mqtt5": _connack(port, mqtt.MQTTv5),
                "mqtt311": _connack(port, mqtt.MQTTv311),
            }
        finally:
            broker.terminate()
            broker.wait(5)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
