"""Secrets never leak: RTSP passwords, MQTT passwords, admin tokens and private keys given to the real
CLI (controller, agent, certs, keys, fleet commands with --json) appear in nothing it prints or logs, in
no error, and in no telemetry message on the broker."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.telemetry_broker import Mosquitto
from tests.integration.test_control_plane import EDGEFLEET, free_port, wait_for
from tests.support.onnx_models import yolo_package

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RTSP_PW = "RtspPw-q8v2x7k3"
AGENT_MQTT_PW = "AgentMqttPw-z5m1c9"
CTL_MQTT_PW = "CtlMqttPw-h4t6p0"
TOKEN = "AdminToken-7Ygh2Kd9Lm3Np5Qr"
WRONG_TOKEN = "WrongToken-3Fs8Jk1Lz0Xw2Vb"


def _run(args: list[str], env: dict[str, str] | None = None, ok: bool = True) -> str:
    p = subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, timeout=60, env=env, check=False)
    out = p.stdout + p.stderr
    assert (p.returncode == 0) == ok, (args, p.returncode, out[-2000:])
    return out


def _key_body(pem: Path) -> list[str]:
    """The base64 lines of a private key file (what must never be printed)."""
    lines = pem.read_text().splitlines()
    assert "PRIVATE KEY" in lines[0], pem
    return [line for line in lines if line and not line.startswith("-----")]


def test_no_secret_in_any_output(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path / "mosquitto").start()
    printed: dict[str, str] = {}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # publisher key, fleet CA, a device certificate
        printed["keys generate"] = _run(["keys", "generate", "--out-dir", str(tmp_path), "--name", "pub"])
        ca = tmp_path / "ca"
        printed["certs init-ca"] = _run(["certs", "init-ca", "--ca-dir", str(ca)])
        printed["certs issue"] = _run(
            ["certs", "issue", "--device", "sec-1", "--ca-dir", str(ca), "--out-dir", str(tmp_path / "dev")]
        )
        printed["certs ls"] = _run(["certs", "ls", "--ca-dir", str(ca)])
        keys = [tmp_path / "pub.pem", ca / "ca.key", *(tmp_path / "dev").glob("*.key")]
        assert len(keys) == 3, list((tmp_path / "dev").iterdir())

        tokens = tmp_path / "tokens.txt"
        tokens.write_text(TOKEN + "\n")
        tokens.chmod(0o600)
        address = f"127.0.0.1:{free_port()}"
        ctl_log = tmp_path / "controller.log"
        with ctl_log.open("ab") as f:
            procs.append(subprocess.Popen(
                [EDGEFLEET, "controller", "serve", "--insecure", "--db", f"sqlite:///{tmp_path}/c.db",
                 "--listen", address, "--data-dir", str(tmp_path / "data"), "--allow-unsigned",
                 "--admin-token-file", str(tokens), "--status-interval", "0.5",
                 "--mqtt", f"mqtt://ingest:{CTL_MQTT_PW}@127.0.0.1:{broker.port}"],
                stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip
        env = {**os.environ, "EDGEFLEET_TOKEN": TOKEN}
        wait_for("the controller", lambda: "listening" in ctl_log.read_text(), 30)

        rtsp = f"rtsp://viewer:{RTSP_PW}@127.0.0.1:{free_port()}/live"
        cfg = {
            "device_id": "sec-1",
            "controller": {"address": address, "backoff_initial_s": 0.2, "backoff_max_s": 1.0},
            "state_dir": str(tmp_path / "agent"),
            "require_signature": False,
            "pipelines": {
                "cam": {"model": str(yolo_package(tmp_path / "pkg")), "sources": [rtsp]},
                "ok": {"model": str(tmp_path / "pkg"), "sources": ["synthetic:?width=64&height=64&fps=5"]},
            },
            "telemetry": {
                "fleet": "f1",
                "broker": f"mqtt://127.0.0.1:{broker.port}",
                "username": "sec-1",
                "password": AGENT_MQTT_PW,
                "interval_s": 0.5,
                "spool_path": str(tmp_path / "spool.db"),
                "gpu": "none",
            },
        }
        agent_cfg = tmp_path / "agent.yaml"
        agent_cfg.write_text(yaml.safe_dump(cfg))
        agent_log = tmp_path / "agent.log"
        with agent_log.open("ab") as f:
            procs.append(subprocess.Popen([EDGEFLEET, "agent", "--config", str(agent_cfg)], stdout=f,
                                          stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
        sub = subprocess.Popen(
            ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(broker.port), "-V", "mqttv5", "-v", "-t", "#", "-W", "8"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for("sec-1 online", lambda: '"online": true' in _run(["devices", "show", "sec-1", "--json",
                                                                   "--controller", address], env), 30)  # fmt: skip
        time.sleep(2.0)  # a few telemetry intervals, reconnect attempts of the RTSP source
        for what in (["devices", "ls"], ["devices", "show", "sec-1"], ["models", "ls"], ["rollout", "ls"]):
            printed[" ".join(what)] = _run([*what, "--json", "--controller", address], env)
        bad = {**os.environ, "EDGEFLEET_TOKEN": WRONG_TOKEN}
        printed["wrong token"] = _run(["devices", "ls", "--json", "--controller", address], bad, ok=False)
        printed["mqtt"] = sub.communicate(timeout=20)[0].decode(errors="replace")
        assert "edgefleet/v1/f1/sec-1/telemetry" in printed["mqtt"]  # telemetry did flow
        printed["devices show (sources)"] = printed["devices show sec-1"]
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        broker.stop()
    printed["controller log"] = ctl_log.read_text(errors="replace")
    printed["agent log"] = agent_log.read_text(errors="replace")
    assert "127.0.0.1" in printed["agent log"] and "rtsp://" in printed["agent log"]  # the source was used
    secrets = [RTSP_PW, AGENT_MQTT_PW, CTL_MQTT_PW, TOKEN, WRONG_TOKEN] + [b for k in keys for b in _key_body(k)]
    leaks = [(where, s[:12]) for where, text in printed.items() for s in secrets if s in text]
    assert leaks == [], leaks
    assert all("PRIVATE KEY" not in text for text in printed.values())
