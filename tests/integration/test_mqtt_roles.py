"""MQTT roles against a real Mosquitto started (as root, so it drops to its own user) from the config
``edgefleet controller mosquitto-config`` generates, with certificates from ``edgefleet certs``.

Each role's allowed and refused publishes (the broker's PUBACK says "Not authorized") and reads (what
reaches a subscriber): device certificates publish only their own status/telemetry/events and read only
their own acknowledgements; controller certificates read the fleet and publish only acknowledgements;
admin and broker certificates publish nothing. Names are unique across roles at issue time."""

from __future__ import annotations

import os
import pwd
import shutil
import ssl
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.subscribeoptions import SubscribeOptions

from tests.integration.test_control_plane import EDGEFLEET, free_port, wait_for

pytestmark = [pytest.mark.integration]

FLEET = "plant"
NAMES = {"device": ["cam-01", "cam-02"], "controller": ["ctl"], "admin": ["alice"], "broker": ["localhost"]}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, timeout=60, check=False)


def ok(*args: str) -> str:
    res = cli(*args)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _world_dir() -> Path:
    """A folder Mosquitto's own user can reach (pytest's tmp_path is under a 0700 folder)."""
    d = Path(tempfile.mkdtemp(prefix="edgefleet-broker-", dir="/tmp"))
    d.chmod(0o755)
    return d


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mqtt-roles")
    ca, out = d / "ca", d / "certs"
    ok("certs", "init-ca", "--ca-dir", str(ca))
    for role, names in NAMES.items():
        for name in names:
            extra = ["--san", "127.0.0.1"] if role == "broker" else []
            ok("certs", "issue", f"--{role}", name, *extra, "--ca-dir", str(ca), "--out-dir", str(out))
    return {"ca_dir": ca, "ca": ca / "ca.pem", "out": out, "root": d}


@pytest.fixture(scope="module")
def broker(pki: dict[str, Path]) -> Iterator[dict[str, Any]]:
    if shutil.which("mosquitto") is None:
        pytest.skip("mosquitto is not installed")
    conf_dir = _world_dir()
    port = free_port()
    out = pki["out"]
    ok(
        "controller", "mosquitto-config", "--ca", str(pki["ca"]), "--cert", str(out / "localhost.pem"),
        "--key", str(out / "localhost.key"), "--crl", str(pki["ca_dir"] / "crl.pem"), "--out", str(conf_dir),
        "--fleet", FLEET, "--port", str(port), "--bind", "127.0.0.1", "--controller-name", "ctl",
        "--admin-name", "alice",
    )  # fmt: skip
    log = (pki["root"] / "mosquitto.log").open("wb")
    proc = subprocess.Popen(["mosquitto", "-c", str(conf_dir / "mosquitto.conf")], stdout=log, stderr=log)
    try:
        info = {"port": port, "proc": proc, "conf_dir": conf_dir, **pki}
        wait_for("mosquitto over TLS", lambda: _connect(info, "cam-01") is not None, 15)
        yield info
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        shutil.rmtree(conf_dir, ignore_errors=True)


class Client:
    """A paho client with a fleet certificate: records PUBACK reasons and what it receives."""

    def __init__(self, info: dict[str, Any], name: str) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self.acks: dict[int, str] = {}
        self.connected = threading.Event()
        self.rc: Any = None
        self.c = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=f"{name}-{uuid.uuid4().hex[:6]}", protocol=mqtt.MQTTv5
        )
        out = info["out"]
        ctx = ssl.create_default_context(cafile=str(info["ca"]))
        ctx.load_cert_chain(str(out / f"{name}.pem"), str(out / f"{name}.key"))
        self.c.tls_set_context(ctx)
        self.c.on_connect = self._on_connect
        self.c.on_publish = lambda _c, _u, mid, rc, _p: self.acks.__setitem__(mid, str(rc))
        self.c.on_message = lambda _c, _u, m: self.messages.append((m.topic, bytes(m.payload)))

    def _on_connect(self, _c: Any, _u: Any, _f: Any, rc: Any, _p: Any = None) -> None:
        self.rc = rc
        self.connected.set()

    def publish(self, topic: str, payload: bytes = b"x") -> str:
        info = self.c.publish(topic, payload, qos=1)
        info.wait_for_publish(5)
        wait_for("the PUBACK", lambda: info.mid in self.acks, 5, every=0.02)
        return self.acks[info.mid]

    def stop(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def _connect(info: dict[str, Any], name: str) -> Client | None:
    cl = Client(info, name)
    try:
        cl.c.connect("127.0.0.1", info["port"])
    except (OSError, ssl.SSLError):
        return None
    cl.c.loop_start()
    if not cl.connected.wait(5) or cl.rc.is_failure:
        cl.stop()
        return None
    return cl


ALLOWED = ("Success", "No matching subscribers")


def test_each_role_publishes_only_what_it_may(broker: dict[str, Any]) -> None:
    base = f"edgefleet/v1/{FLEET}"
    dev, ctl, admin = (_connect(broker, n) for n in ("cam-01", "ctl", "alice"))
    assert dev and ctl and admin
    try:
        for kind in ("status", "telemetry", "events"):
            assert dev.publish(f"{base}/cam-01/{kind}") in ALLOWED, kind
        refused = {
            "cam-01": (dev, [f"{base}/cam-02/telemetry", f"{base}/cam-01/ack", "edgefleet/v1/other/cam-01/telemetry"]),
            "ctl": (
                ctl,
                [f"{base}/cam-01/telemetry", f"{base}/ctl/telemetry", f"{base}/controller/ctl/telemetry", f"{base}/x"],
            ),
            "alice": (
                admin,
                [
                    f"{base}/cam-01/telemetry",
                    f"{base}/alice/telemetry",
                    f"{base}/admin/alice/telemetry",
                    f"{base}/cam-01/ack",
                ],
            ),
        }
        for who, (client, topics) in refused.items():
            for topic in topics:
                assert client.publish(topic) == "Not authorized", (who, topic)
        assert ctl.publish(f"{base}/cam-01/ack") in ALLOWED
    finally:
        for c in (dev, ctl, admin):
            c.stop()


def test_each_role_reads_only_what_it_may(broker: dict[str, Any]) -> None:
    base = f"edgefleet/v1/{FLEET}"
    a, b, ctl, admin = (_connect(broker, n) for n in ("cam-01", "cam-02", "ctl", "alice"))
    assert a and b and ctl and admin
    try:
        for c in (b, ctl, admin):
            c.c.subscribe(f"{base}/#", options=SubscribeOptions(qos=1))  # everything it may see
        a.c.subscribe(f"{base}/cam-01/ack", options=SubscribeOptions(qos=1))
        b.c.subscribe(f"$share/edgefleet-ingest/{base}/+/telemetry", options=SubscribeOptions(qos=1))
        time.sleep(0.5)
        a.publish(f"{base}/cam-01/telemetry", b"t1")
        ctl.publish(f"{base}/cam-01/ack", b"ack1")
        wait_for("cam-01's acknowledgement", lambda: (f"{base}/cam-01/ack", b"ack1") in a.messages, 5)
        wait_for("the controller's copy", lambda: (f"{base}/cam-01/telemetry", b"t1") in ctl.messages, 5)
        wait_for("the admin's copy", lambda: (f"{base}/cam-01/telemetry", b"t1") in admin.messages, 5)
        time.sleep(0.5)
        assert b.messages == []  # another device reads nothing of cam-01's, not even through the shared group
        assert all(t.endswith("/telemetry") for t, _ in ctl.messages + admin.messages)  # acks are the device's
    finally:
        for c in (a, b, ctl, admin):
            c.stop()


def test_a_broker_certificate_is_no_client(broker: dict[str, Any]) -> None:
    client = _connect(broker, "localhost")
    if client is not None:  # the handshake may pass; it must still be able to do nothing
        try:
            assert client.publish(f"edgefleet/v1/{FLEET}/localhost/telemetry") == "Not authorized"
        finally:
            client.stop()


def test_admin_publishing_telemetry_is_refused_and_nothing_is_stored(broker: dict[str, Any], tmp_path: Path) -> None:
    from google.protobuf import json_format
    from sqlalchemy import create_engine

    from edgefleet.cloud._telemetry import Ingester, TelemetryStore, parse_broker_url
    from edgefleet.proto.v1 import telemetry_pb2 as pb

    store = TelemetryStore(create_engine(f"sqlite:///{tmp_path / 't.db'}"))
    out = broker["out"]
    ing = Ingester(
        parse_broker_url(
            f"mqtts://localhost:{broker['port']}", ca_file=broker["ca"], cert_file=out / "ctl.pem",
            key_file=out / "ctl.key",
        ),
        store, client_id=f"ingest-{uuid.uuid4().hex[:6]}", fleet=FLEET, compact_every_s=None,
    )  # fmt: skip
    ing.start()
    admin = _connect(broker, "alice")
    assert admin is not None and ing.wait_subscribed(10)
    try:
        msg = pb.Telemetry(interval_s=1.0)
        msg.header.device_id, msg.header.fleet, msg.header.sequence, msg.header.schema = "alice", FLEET, 1, 1
        payload = json_format.MessageToJson(msg, indent=None).encode()
        assert admin.publish(f"edgefleet/v1/{FLEET}/alice/telemetry", payload) == "Not authorized"
        time.sleep(1.0)
    finally:
        admin.stop()
        ing.stop()
    assert store.devices() == [] and ing.stats().received == 0


def test_a_name_is_refused_for_a_second_role(pki: dict[str, Path], tmp_path: Path) -> None:
    for role, name in (("device", "ctl"), ("admin", "cam-01"), ("controller", "alice"), ("device", "localhost")):
        res = cli("certs", "issue", f"--{role}", name, "--ca-dir", str(pki["ca_dir"]), "--out-dir", str(tmp_path))
        assert res.returncode == 1, (role, name, res.stdout)
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and name in lines[0] and "already" in lines[0], res.stderr
        assert not (tmp_path / f"{name}.pem").exists()
    again = cli("certs", "issue", "--device", "cam-01", "--ca-dir", str(pki["ca_dir"]), "--out-dir", str(tmp_path))
    assert again.returncode == 0, again.stderr  # the same role again is a renewal


def test_generated_config_runs_as_mosquittos_own_user(broker: dict[str, Any]) -> None:
    status = Path(f"/proc/{broker['proc'].pid}/status").read_text()
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    want = "mosquitto" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    assert pwd.getpwuid(uid).pw_name == want
    key = next(p for p in broker["conf_dir"].iterdir() if p.suffix == ".key")
    assert stat.S_IMODE(key.stat().st_mode) & 0o077 in (0, 0o040)  # never readable by others


def test_generator_refuses_a_folder_mosquittos_user_cannot_reach(pki: dict[str, Path], tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root starts Mosquitto as another user")
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    out = pki["out"]
    res = cli(
        "controller", "mosquitto-config", "--ca", str(pki["ca"]), "--cert", str(out / "localhost.pem"),
        "--key", str(out / "localhost.key"), "--out", str(hidden / "broker"), "--fleet", FLEET,
    )  # fmt: skip
    assert res.returncode == 1
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "mosquitto" in lines[0] and str(hidden) in lines[0], res.stderr
    assert not (hidden / "broker").exists()
