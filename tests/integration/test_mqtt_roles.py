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
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paho.mqtt.subscribeoptions import SubscribeOptions

from tests.integration.test_control_plane import EDGEFLEET, free_port, wait_for
from tests.integration.test_security_mqtt import connect, generated_broker

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
    info: dict[str, Any] = {"port": port, "conf_dir": conf_dir, **pki}
    with generated_broker(conf_dir, pki["root"] / "mosquitto.log", info):
        yield info


ALLOWED = ("Success", "No matching subscribers")


def test_each_role_publishes_only_what_it_may(broker: dict[str, Any]) -> None:
    base = f"edgefleet/v1/{FLEET}"
    dev, ctl, admin = (connect(broker, n) for n in ("cam-01", "ctl", "alice"))
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
    a, b, ctl, admin = (connect(broker, n) for n in ("cam-01", "cam-02", "ctl", "alice"))
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
    client = connect(broker, "localhost")
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
    admin = connect(broker, "alice")
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


def test_a_device_in_the_ingest_group_reads_nothing_and_loses_nothing(broker: dict[str, Any], tmp_path: Path) -> None:
    """Mosquitto 2.0's ACL file does not check subscriptions: a device may join the ingest group, and the
    broker then hands it a share of the messages, which its ACL refuses and drops. Nothing is read by it,
    and nothing is lost: what the controller did not store is sent again (docs/security.md)."""
    from sqlalchemy import create_engine

    from edgefleet.cloud._telemetry import Ingester, TelemetryStore
    from edgefleet.cloud._telemetry import parse_broker_url as cloud_url
    from edgefleet.edge._telemetry import Identity, MqttPublisher, Priority, Spool, parse_broker_url
    from edgefleet.proto.v1 import telemetry_pb2 as pb

    out, ca, port = broker["out"], broker["ca"], broker["port"]
    store = TelemetryStore(create_engine(f"sqlite:///{tmp_path / 't.db'}"))
    url = f"mqtts://localhost:{port}"
    ing = Ingester(
        cloud_url(url, ca_file=ca, cert_file=out / "ctl.pem", key_file=out / "ctl.key"),
        store, client_id=f"ingest-{uuid.uuid4().hex[:6]}", fleet=FLEET, compact_every_s=None,
    )  # fmt: skip
    ing.start()
    thief = connect(broker, "cam-02")
    assert thief is not None and ing.wait_subscribed(10)
    thief.c.subscribe(f"$share/edgefleet-ingest/edgefleet/v1/{FLEET}/+/telemetry", options=SubscribeOptions(qos=1))
    address = parse_broker_url(url, ca_file=ca, cert_file=out / "cam-01.pem", key_file=out / "cam-01.key")
    pub = MqttPublisher(address, Identity(FLEET, "cam-01"), Spool(":memory:"), ack_timeout_s=0.5)
    try:
        time.sleep(0.5)
        pub.start()
        sent = [pub.publish("telemetry", pb.Telemetry(interval_s=1.0), Priority.ROUTINE) for _ in range(40)]
        assert pub.flush(60), pub.stats()
    finally:
        pub.stop(2)
        thief.stop()
        ing.stop()
    assert store.sequences("cam-01", "telemetry") == sent
    assert thief.messages == [] and pub.stats().resends >= 1  # its share was dropped, then sent again
