"""Camera credentials managed from the controller alone, over mutual TLS: the operator's CLI seals a
camera's user:password to one device's certificate key; the controller stores and forwards only the
sealed bytes; the device it was sealed to opens it and its camera receives the right credentials; the
other device gets nothing it can open; and the clear value is in no output (CLI, --json, logs) and not
in the controller's database file."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_control_plane import EDGEFLEET, Proc, free_port, wait_for
from tests.support.onnx_models import yolo_package

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAM_SECRET = "viewer:CamPw-p3k9Zq7w"
NEW_SECRET = "viewer:CamPw2-Rt5vX8n1"  # the camera's password changed
SITE = {"site": "sealed"}


class RtspDoor:
    """A camera that answers every RTSP request with 401 (Basic) and records the credentials it was sent."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self.auth: list[str] = []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        buf = b""
        try:
            while True:
                data = conn.recv(4096)
                if not data:
                    return
                buf += data
                while b"\r\n\r\n" in buf:
                    head, buf = buf.split(b"\r\n\r\n", 1)
                    lines = head.decode(errors="replace").split("\r\n")
                    cseq = next((ln.split(":", 1)[1].strip() for ln in lines if ln.lower().startswith("cseq")), "1")
                    for ln in lines:
                        if ln.lower().startswith("authorization: basic "):
                            self.auth.append(base64.b64decode(ln.split(" ", 2)[2]).decode(errors="replace"))
                    challenge = 'WWW-Authenticate: Basic realm="cam"'
                    conn.sendall(f"RTSP/1.0 401 Unauthorized\r\nCSeq: {cseq}\r\n{challenge}\r\n\r\n".encode())
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


def _certs(*args: str) -> None:
    res = subprocess.run([EDGEFLEET, "certs", *args], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr


def test_camera_secrets_reach_only_their_device(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    ca, out = tmp_path / "ca", tmp_path / "certs"
    _certs("init-ca", "--ca-dir", str(ca))
    _certs("issue", "--controller", "localhost", "--san", "127.0.0.1", "--ca-dir", str(ca), "--out-dir", str(out))
    for name in ("s1", "s2"):
        _certs("issue", "--device", name, "--ca-dir", str(ca), "--out-dir", str(out))
    _certs("issue", "--admin", "ops", "--ca-dir", str(ca), "--out-dir", str(out))
    address = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "EDGEFLEET_TLS_CA": str(ca / "ca.pem"),
        "EDGEFLEET_TLS_CERT": str(out / "ops.pem"),
        "EDGEFLEET_TLS_KEY": str(out / "ops.key"),
        "EDGEFLEET_CONTROLLER": address,
    }
    printed: dict[str, str] = {}

    def cli(*args: str, ok: bool = True, stdin: str | None = None) -> str:
        res = subprocess.run(
            [EDGEFLEET, *args], capture_output=True, text=True, timeout=60, env=env, input=stdin, check=False
        )
        text = res.stdout + res.stderr
        assert (res.returncode == 0) == ok, (args, text[-2000:])
        printed[" ".join(args)] = text
        return text

    door = RtspDoor()
    model = yolo_package(tmp_path / "model")
    procs: list[Proc] = []
    try:
        procs.append(
            Proc(
                [
                    EDGEFLEET, "controller", "serve", "--db", f"sqlite:///{tmp_path}/c.db", "--listen", address,
                    "--data-dir", str(tmp_path / "data"), "--allow-unsigned", "--status-interval", "0.5",
                    "--health-window", "1", "--tick", "0.2",
                    "--tls-cert", str(out / "localhost.pem"), "--tls-key", str(out / "localhost.key"),
                    "--client-ca", str(ca / "ca.pem"),
                ],
                tmp_path / "controller.log",
            ).start()
        )  # fmt: skip
        for name in ("s1", "s2"):
            cfg: dict[str, Any] = {
                "device_id": name,
                "labels": {**SITE, "dev": name},
                "controller": {
                    "address": address,
                    "backoff_initial_s": 0.2,
                    "backoff_max_s": 1.0,
                    "tls": {
                        "ca": str(ca / "ca.pem"),
                        "cert": str(out / f"{name}.pem"),
                        "key": str(out / f"{name}.key"),
                    },
                },
                "require_signature": False,
                "state_dir": str(tmp_path / name),
                "pipelines": {"main": {"model": str(model), "sources": ["synthetic:?width=64&height=48&fps=5"]}},
            }
            (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
            procs.append(
                Proc([EDGEFLEET, "agent", "--config", str(tmp_path / f"{name}.yaml")], tmp_path / f"{name}.log").start()
            )
        for name in ("s1", "s2"):
            wait_for(f"{name} online", lambda n=name: json.loads(cli("devices", "show", n, "--json")).get("online"), 45)
        assert "BEGIN PUBLIC KEY" in json.loads(cli("devices", "show", "s1", "--json"))["sealing_key"]

        cli("secrets", "set", "--device", "s1", "cam-login", "--stdin", stdin=CAM_SECRET + "\n")
        assert "cam-login" in cli("secrets", "ls")
        spec = {
            "name": "sealed-site",
            "version": 1,
            "connect_timeout_s": 30,
            "pipelines": {
                "main": {
                    "model": "toy-yolo",
                    "sources": [
                        {"type": "synthetic", "id": "cam0", "width": 64, "height": 48, "fps": 5},
                        {
                            "type": "network",
                            "id": "door",
                            "url": f"rtsp://${{secret:cam-login}}@127.0.0.1:{door.port}/cam",
                        },
                    ],
                }
            },
        }
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
        cli("pipelines", "push", str(tmp_path / "spec.yaml"))
        cli("pipelines", "show", "sealed-site:1")
        # one rollout to both devices: only s1 holds a secret sealed to it; s2 cannot run the spec and
        # says why, without the value
        cli("deploy", "--pipeline", "sealed-site:1", "--to", "site=sealed", "--waves", "100%", "--max-failures", "0.6")
        wait_for("the camera got s1's credentials", lambda: CAM_SECRET in door.auth, 60)
        wait_for(
            "s2 refused the spec",
            lambda: (
                "not sealed to this device" in json.loads(cli("devices", "show", "s2", "--json")).get("last_event", "")
            ),
            60,
        )
        # the password changes at the camera: set it again; the device gets it and replaces the camera live
        cli("secrets", "set", "--device", "s1", "cam-login", "--stdin", stdin=NEW_SECRET + "\n")
        wait_for("the camera got the new credentials", lambda: NEW_SECRET in door.auth, 60)
        # a device certificate cannot read the controller's secrets (FleetService is for admins)
        dev_env = {**env, "EDGEFLEET_TLS_CERT": str(out / "s2.pem"), "EDGEFLEET_TLS_KEY": str(out / "s2.key")}
        res = subprocess.run(
            [EDGEFLEET, "secrets", "ls"], capture_output=True, text=True, timeout=60, env=dev_env, check=False
        )
        assert res.returncode != 0 and "admin" in (res.stdout + res.stderr)
        printed["secrets ls as s2"] = res.stdout + res.stderr
        for what in (("devices", "ls"), ("rollout", "ls"), ("secrets", "ls"), ("devices", "show", "s1")):
            cli(*what, "--json")
        cli("rollout", "status")
    finally:
        for p in reversed(procs):
            p.kill(signal.SIGTERM)
        door.close()
    assert door.auth.count(CAM_SECRET) >= 1 and set(door.auth) == {CAM_SECRET, NEW_SECRET}
    for log in ("controller.log", "s1.log", "s2.log"):
        printed[log] = (tmp_path / log).read_text(errors="replace")
    assert "door" in printed["s1.log"]  # the source was opened
    files = [tmp_path / "c.db", *tmp_path.glob("c.db-*"), tmp_path / "s1" / "spec.json", tmp_path / "s2" / "spec.json"]
    for password in (CAM_SECRET.split(":")[1], NEW_SECRET.split(":")[1]):
        leaks = [where for where, text in printed.items() if password in text]
        assert leaks == [], leaks
        for f in files:
            if f.exists():
                assert password.encode() not in f.read_bytes(), f
