"""MQTT over TLS with per-device identities: a real Mosquitto started with the configuration that
`edgefleet controller mosquitto-config` renders, certificates from `edgefleet certs`."""

from __future__ import annotations

import contextlib
import shutil
import ssl
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

from tests.integration.test_control_plane import EDGEFLEET, free_port, wait_for

pytestmark = [pytest.mark.integration]

FLEET = "plant"


def run(*args: str) -> None:
    res = subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if shutil.which("mosquitto") is None:
        pytest.skip("mosquitto is not installed")
    d = tmp_path_factory.mktemp("mqtt-pki")
    ca, out = d / "ca", d / "certs"
    run("certs", "init-ca", "--ca-dir", str(ca))
    run("certs", "issue", "--broker", "localhost", "--san", "127.0.0.1", "--ca-dir", str(ca), "--out-dir", str(out))
    run("certs", "issue", "--controller", "ctl", "--ca-dir", str(ca), "--out-dir", str(out))
    for dev in ("cam-01", "cam-02"):
        run("certs", "issue", "--device", dev, "--ca-dir", str(ca), "--out-dir", str(out))
    run("certs", "init-ca", "--ca-dir", str(d / "rogue"))
    run(
        "certs",
        "issue",
        "--device",
        "cam-01",
        "--ca-dir",
        str(d / "rogue"),
        "--out-dir",
        str(d / "rogue-certs"),
    )
    port = free_port()
    conf_dir = Path(tempfile.mkdtemp(prefix="edgefleet-broker-", dir="/tmp"))  # Mosquitto's user reaches it
    conf_dir.chmod(0o755)
    run(
        "controller", "mosquitto-config", "--ca", str(ca / "ca.pem"),
        "--cert", str(out / "localhost.pem"), "--key", str(out / "localhost.key"),
        "--out", str(conf_dir), "--fleet", FLEET, "--port", str(port), "--bind", "127.0.0.1",
        "--crl", str(ca / "crl.pem"), "--controller-name", "ctl",
    )  # fmt: skip
    info = {"port": port, "ca": ca / "ca.pem", "out": out, "rogue": d / "rogue-certs"}
    with generated_broker(conf_dir, d / "mosquitto.log", info):
        yield info


@contextlib.contextmanager
def generated_broker(conf_dir: Path, log_path: Path, info: dict[str, Any]) -> Iterator[subprocess.Popen[bytes]]:
    """``mosquitto -c conf_dir/mosquitto.conf`` until it takes cam-01's TLS connection (``info['proc']``);
    stopped and ``conf_dir`` removed afterwards."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(["mosquitto", "-c", str(conf_dir / "mosquitto.conf")], stdout=log, stderr=log)
        info["proc"] = proc
        try:
            wait_for("mosquitto over TLS", lambda: connect(info, "cam-01") is not None, 15)
            yield proc
        finally:
            proc.terminate()
            proc.wait(10)
            shutil.rmtree(conf_dir, ignore_errors=True)


class Client:
    """A paho client with a fleet certificate: records what it receives and each PUBACK's reason."""

    def __init__(self, info: dict[str, Any], name: str, folder: str = "out") -> None:
        self.messages: list[tuple[str, bytes]] = []
        self.acks: dict[int, str] = {}
        self.connected = threading.Event()
        self.rc: Any = None
        self.c = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=f"{name}-{uuid.uuid4().hex[:6]}", protocol=mqtt.MQTTv5
        )
        d = info[folder]
        self.c.tls_set(
            ca_certs=str(info["ca"]), certfile=str(d / f"{name}.pem"), keyfile=str(d / f"{name}.key"),
            tls_version=ssl.PROTOCOL_TLS_CLIENT,
        )  # fmt: skip
        self.c.on_connect = self._on_connect
        self.c.on_message = lambda _c, _u, m: self.messages.append((m.topic, m.payload))
        self.c.on_publish = lambda _c, _u, mid, rc, _p: self.acks.__setitem__(mid, str(rc))

    def _on_connect(self, _c: Any, _u: Any, _f: Any, rc: Any, _p: Any = None) -> None:
        self.rc = rc
        self.connected.set()

    def start(self, port: int) -> Client:
        self.c.connect("localhost", port)
        self.c.loop_start()
        return self

    def publish(self, topic: str, payload: bytes = b"x") -> str:
        """Publish with QoS 1; the PUBACK's reason ("Success", "Not authorized", ...)."""
        info = self.c.publish(topic, payload, qos=1)
        info.wait_for_publish(5)
        wait_for("the PUBACK", lambda: info.mid in self.acks, 5, every=0.02)
        return self.acks[info.mid]

    def stop(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def connect(info: dict[str, Any], name: str, folder: str = "out") -> Client | None:
    cl = Client(info, name, folder)
    try:
        cl.start(info["port"])
    except (OSError, ssl.SSLError):
        cl.c.loop_stop()
        return None
    if not cl.connected.wait(5) or cl.rc.is_failure:
        cl.stop()
        return None
    return cl


def _settle(clients: list[Client], timeout: float = 1.5) -> None:
    time.sleep(timeout)


def test_devices_are_confined_to_their_own_topics(broker: dict[str, Any]) -> None:
    ctl, a, b = (connect(broker, n) for n in ("ctl", "cam-01", "cam-02"))
    assert ctl and a and b
    try:
        ctl.c.subscribe(f"$share/ingest/edgefleet/v1/{FLEET}/#", qos=1)
        b.c.subscribe(f"edgefleet/v1/{FLEET}/#", qos=1)  # cam-02 tries to read everybody
        b.c.subscribe(f"edgefleet/v1/{FLEET}/cam-01/#", qos=1)
        time.sleep(0.5)
        a.c.publish(f"edgefleet/v1/{FLEET}/cam-01/telemetry", b"own", qos=1).wait_for_publish(5)
        a.c.publish(f"edgefleet/v1/{FLEET}/cam-02/telemetry", b"forged", qos=1).wait_for_publish(5)
        a.c.publish("edgefleet/v1/other/cam-01/telemetry", b"other-fleet", qos=1).wait_for_publish(5)
        b.c.publish(f"edgefleet/v1/{FLEET}/cam-02/status", b"b-own", qos=1).wait_for_publish(5)
        wait_for("the controller's copy", lambda: len(ctl.messages) >= 2, 5)
        time.sleep(0.5)
        got = sorted(p for _t, p in ctl.messages)
        assert got == [b"b-own", b"own"]  # no forged, no other-fleet message reached anyone
        assert all(p == b"b-own" for _t, p in b.messages)  # cam-02 never sees cam-01's messages
        # a device cannot publish as the controller either: nothing outside its subtree is delivered
        b.c.publish(f"edgefleet/v1/{FLEET}/cam-01/events", b"as-cam-01", qos=1).wait_for_publish(5)
        time.sleep(0.5)
        assert b"as-cam-01" not in [p for _t, p in ctl.messages]
    finally:
        for c in (ctl, a, b):
            c.stop()


def test_unknown_certificate_cannot_connect(broker: dict[str, Any]) -> None:
    assert connect(broker, "cam-01", folder="rogue") is None
    good = connect(broker, "cam-01")
    assert good is not None
    good.stop()


def test_real_agent_and_ingester_over_mqtt_tls(broker: dict[str, Any], tmp_path: Any) -> None:
    """The agent's own telemetry publisher (cam-01's certificate) and the controller's ingester (the
    controller certificate, shared subscription) through the TLS + ACL broker: cam-01's messages arrive;
    a publisher claiming to be cam-02 with cam-01's certificate is stopped by the ACL (the agent's own
    configuration refuses that mix before it connects)."""
    import sqlalchemy as sa

    from edgefleet.cloud._telemetry import Ingester, TelemetryStore, create_tables, parse_broker_url
    from edgefleet.edge._telemetry import (
        BrokerUrlError,
        Identity,
        MqttPublisher,
        Priority,
        Spool,
        TelemetryAgent,
        TelemetryConfig,
    )
    from edgefleet.edge._telemetry import parse_broker_url as agent_url
    from edgefleet.proto.v1 import telemetry_pb2 as pb

    engine = sa.create_engine(f"sqlite:///{tmp_path}/telemetry.db")
    create_tables(engine)
    store = TelemetryStore(engine)
    out, ca, port = broker["out"], broker["ca"], broker["port"]
    ingester = Ingester(
        parse_broker_url(f"mqtts://localhost:{port}", ca_file=ca, cert_file=out / "ctl.pem",
                         key_file=out / "ctl.key"),
        store, client_id=f"ingest-{uuid.uuid4().hex[:6]}", fleet=FLEET,
    )  # fmt: skip
    ingester.start()

    def config(claimed: str, cert: str) -> TelemetryConfig:
        return TelemetryConfig(
            fleet=FLEET, device_id=claimed, broker=f"mqtts://localhost:{port}", ca_file=ca,
            cert_file=out / f"{cert}.pem", key_file=out / f"{cert}.key", interval_s=0.5,
            spool_path=tmp_path / f"{claimed}-spool.db", gpu="none",
        )  # fmt: skip

    for claimed, cert in (("cam-02", "cam-01"), ("cam-01", "ctl")):
        with pytest.raises(BrokerUrlError, match="certificate"):
            config(claimed, cert).broker_address()
    honest = TelemetryAgent(config("cam-01", "cam-01"), agent_version="test")
    honest.start()
    # the publisher itself, past the configuration's check: cam-01's certificate, cam-02's topics
    address = agent_url(f"mqtts://localhost:{port}", ca_file=ca, cert_file=out / "cam-01.pem",
                        key_file=out / "cam-01.key")  # fmt: skip
    impostor = MqttPublisher(address, Identity(FLEET, "cam-02"), Spool(":memory:"))
    impostor.start()
    impostor.publish("telemetry", pb.Telemetry(interval_s=1.0), Priority.ROUTINE)
    try:
        wait_for(
            "cam-01's telemetry stored",
            lambda: any(d.device_id == "cam-01" and d.online for d in store.devices(fleet=FLEET)),
            20,
        )
        wait_for("the broker's refusals", lambda: impostor.stats().rejected >= 2, 10)  # its ONLINE and telemetry
        assert honest.publisher is not None
        wait_for("cam-01 acknowledged", lambda: honest.publisher.stats().watermarks > 0, 10)  # type: ignore[union-attr]
        assert not any(d.device_id == "cam-02" for d in store.devices(fleet=FLEET))
    finally:
        honest.stop()
        impostor.stop(1)
        ingester.stop()
