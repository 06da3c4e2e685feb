"""The embedded MQTT 5 broker's own edges (the telemetry flows run against it in test_telemetry_mqtt.py)."""

from __future__ import annotations

import base64
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from edgefleet_devbroker import topic_matches

from .telemetry_broker import EmbeddedBroker, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    b = EmbeddedBroker(tmp_path / "broker").start()
    yield b
    b.stop()


def _client(version: int, port: int) -> tuple[mqtt.Client, threading.Event, list[object]]:
    c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, protocol=version)
    done, codes = threading.Event(), []

    def on_connect(_c: mqtt.Client, _u: object, _f: object, reason: object, _p: object) -> None:
        codes.append(reason)
        done.set()

    c.on_connect = on_connect
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c, done, codes


def test_topic_filters() -> None:
    assert topic_matches("a/+/c", "a/b/c") and not topic_matches("a/+/c", "a/b/d")
    assert topic_matches("a/#", "a") and topic_matches("a/#", "a/b/c") and topic_matches("#", "x/y")
    assert not topic_matches("+/x", "$SYS/x") and topic_matches("$SYS/#", "$SYS/x")
    assert not topic_matches("a/b", "a/b/c") and not topic_matches("a/b/c", "a/b")


def test_mqtt311_client_is_refused_cleanly(broker: EmbeddedBroker) -> None:
    c, done, codes = _client(mqtt.MQTTv311, broker.port)  # paho retries as MQTT 3.1, refused the same way
    try:
        done.wait(2)
        assert not c.is_connected()
        assert all(code.is_failure for code in codes)  # type: ignore[attr-defined]
    finally:
        c.loop_stop()


def test_garbage_closes_that_connection_only(broker: EmbeddedBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
        s.sendall(b"\x10\xff\xff\xff\xff\x7f garbage")  # CONNECT with a 5-byte remaining length
        s.settimeout(5)
        data = b""
        try:
            while chunk := s.recv(100):
                data += chunk
        except OSError:
            pass
    assert data == b"" or data[0] >> 4 == 14  # closed, with or without a DISCONNECT
    c, done, codes = _client(mqtt.MQTTv5, broker.port)  # the broker still serves everyone else
    got = threading.Event()
    c.on_message = lambda *_: got.set()
    try:
        assert done.wait(5) and not codes[0].is_failure  # type: ignore[attr-defined]
        c.subscribe("t/#", qos=1)
        c.publish("t/x", b"hello", qos=1).wait_for_publish(5)
        assert got.wait(5)
    finally:
        c.disconnect()
        c.loop_stop()


def test_retained_message_reaches_a_late_subscriber_and_empty_payload_clears_it(broker: EmbeddedBroker) -> None:
    pub, done, _ = _client(mqtt.MQTTv5, broker.port)
    assert done.wait(5)
    pub.publish("edgefleet/v1/f/d/status", b'{"state": 1}', qos=1, retain=True).wait_for_publish(5)
    sub, done2, _ = _client(mqtt.MQTTv5, broker.port)
    seen: list[tuple[str, bytes, bool]] = []
    got = threading.Event()

    def on_message(_c: mqtt.Client, _u: object, m: mqtt.MQTTMessage) -> None:
        seen.append((m.topic, m.payload, m.retain))
        got.set()

    sub.on_message = on_message
    try:
        assert done2.wait(5)
        sub.subscribe("edgefleet/v1/+/+/status", qos=1)
        assert got.wait(5)
        assert seen == [("edgefleet/v1/f/d/status", b'{"state": 1}', True)]
        pub.publish("edgefleet/v1/f/d/status", b"", qos=1, retain=True).wait_for_publish(5)
    finally:
        for c in (pub, sub):
            c.disconnect()
            c.loop_stop()
    late, done3, _ = _client(mqtt.MQTTv5, broker.port)
    none = threading.Event()
    late.on_message = lambda *_: none.set()
    try:
        assert done3.wait(5)
        late.subscribe("edgefleet/v1/+/+/status", qos=1)
        assert not none.wait(1.0)  # cleared
    finally:
        late.disconnect()
        late.loop_stop()


def test_keepalive_timeout_publishes_the_will(broker: EmbeddedBroker) -> None:
    """A client that goes silent (no PINGREQ) is dropped after 1.5 x its keepalive and its Last Will sent."""
    watcher, done, _ = _client(mqtt.MQTTv5, broker.port)
    wills: list[bytes] = []
    got = threading.Event()

    def on_message(_c: mqtt.Client, _u: object, m: mqtt.MQTTMessage) -> None:
        wills.append(m.payload)
        got.set()

    watcher.on_message = on_message
    try:
        assert done.wait(5)
        watcher.subscribe("will/#", qos=1)
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
            # CONNECT by hand, MQTT 5, keepalive 1 s, will "will/silent" = "gone", then silence
            will = b"\x00" + b"\x00\x0bwill/silent" + b"\x00\x04gone"  # will props, topic, payload
            var = b"\x00\x04MQTT\x05" + bytes([0x02 | 0x04 | 0x08]) + b"\x00\x01" + b"\x00"
            payload = b"\x00\x06silent" + will
            body = var + payload
            s.sendall(bytes([0x10, len(body)]) + body)
            assert s.recv(64)[0] >> 4 == 2  # CONNACK
            assert got.wait(5), "no will after the keepalive ran out"
        assert wills == [b"gone"]
    finally:
        watcher.disconnect()
        watcher.loop_stop()


def test_shared_subscription_splits_and_unsubscribe_stops_delivery(broker: EmbeddedBroker) -> None:
    counts = [0, 0]
    subs = []
    for k in range(2):
        c, done, _ = _client(mqtt.MQTTv5, broker.port)
        assert done.wait(5)

        def on_message(_c: mqtt.Client, _u: object, _m: mqtt.MQTTMessage, k: int = k) -> None:
            counts[k] += 1

        c.on_message = on_message
        c.subscribe("$share/g/data/#", qos=1)
        subs.append(c)
    pub, done, _ = _client(mqtt.MQTTv5, broker.port)
    try:
        assert done.wait(5)
        time.sleep(0.3)  # both subscriptions in place
        for i in range(40):
            pub.publish(f"data/{i}", b"x", qos=1).wait_for_publish(5)
        deadline = time.monotonic() + 5
        while sum(counts) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum(counts) == 40 and counts[0] == counts[1] == 20  # each message once, round robin
        subs[0].unsubscribe("$share/g/data/#")
        time.sleep(0.3)
        for i in range(10):
            pub.publish(f"data/{i}", b"x", qos=1).wait_for_publish(5)
        deadline = time.monotonic() + 5
        while sum(counts) < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert counts == [20, 30]
    finally:
        for c in (*subs, pub):
            c.disconnect()
            c.loop_stop()


def test_sessions_expire_after_their_interval() -> None:
    """Unit-level: an away client's session (and what is queued for it) goes once its expiry has passed."""
    from edgefleet_devbroker import EmbeddedBroker as Broker
    from edgefleet_devbroker import _Session

    b = Broker()
    b.sessions["keep"] = _Session("keep", expiry_s=60, gone_at=100.0)
    b.sessions["drop"] = _Session("drop", expiry_s=10, gone_at=100.0)
    assert b.expire(now=120.0) == ["drop"]
    assert list(b.sessions) == ["keep"]
    assert b.expire(now=161.0) == ["keep"] and not b.sessions


def test_a_subscriber_that_stops_reading_does_not_grow_the_broker(broker: EmbeddedBroker) -> None:
    """QoS 0 to a client that never reads: the broker drops past MAX_UNREAD_BYTES (and says so) instead
    of buffering every message, and keeps serving a subscriber that reads."""
    import psutil

    from edgefleet_devbroker import MAX_UNREAD_BYTES

    stuck = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client_id = b"stuck"
    connect = b"\x00\x04MQTT\x05\x02\x00\x00\x00" + len(client_id).to_bytes(2, "big") + client_id
    stuck.sendall(bytes([0x10, len(connect)]) + connect)
    assert stuck.recv(4)[0] >> 4 == 2  # CONNACK
    subscribe = b"\x00\x01\x00" + b"\x00\x07flood/#" + b"\x00"
    stuck.sendall(bytes([0x82, len(subscribe)]) + subscribe)
    time.sleep(0.3)  # SUBACK arrives; from here on this client reads nothing
    reader, done, codes = _client(mqtt.MQTTv5, broker.port)
    got: list[bytes] = []
    reader.on_message = lambda _c, _u, m: got.append(m.payload)
    pub, pub_done, _ = _client(mqtt.MQTTv5, broker.port)
    proc = psutil.Process(broker.proc.pid)  # type: ignore[union-attr]
    try:
        assert done.wait(5) and pub_done.wait(5) and not codes[0].is_failure  # type: ignore[attr-defined]
        # the flood at QoS 0, the end marker at QoS 1: a reader that lags past the bound may lose QoS 0
        # messages too (by design), never the QoS 1 one
        reader.subscribe([("flood/x", 0), ("flood/end", 1)])
        time.sleep(0.3)
        before = proc.memory_info().rss
        payload = b"x" * 16_384
        sent = 8 * MAX_UNREAD_BYTES // len(payload)  # 64 MiB of QoS 0 for a client that reads none of it
        for i in range(sent):
            pub.publish("flood/x", payload, qos=0)
            if i % 256 == 0:
                time.sleep(0.01)  # let paho's loop keep up
        pub.publish("flood/end", b"end", qos=1).wait_for_publish(10)
        deadline = time.monotonic() + 15
        while b"end" not in got and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b"end" in got and len(got) > 1  # the reading subscriber is still served
        # Bounded: up to MAX_UNREAD_BYTES for the stuck client, as much again for the reading one when it
        # lags, plus the interpreter's churn: 8-25 MiB seen on a 2-core machine, 72-77 MiB without the bound.
        grown = proc.memory_info().rss - before
        assert grown < 5 * MAX_UNREAD_BYTES, f"broker grew by {grown / 2**20:.0f} MiB"
        log = (broker.workdir / "broker.log").read_text()
        assert "session stuck: it is not reading: QoS 0" in log
    finally:
        stuck.close()
        reader.disconnect()
        pub.disconnect()
        reader.loop_stop()
        pub.loop_stop()


def _packets(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(packet type, body) for each whole MQTT packet in ``data``."""
    pos = 0
    while pos < len(data):
        kind, length, shift, pos = data[pos] >> 4, 0, 0, pos + 1
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        yield kind, data[pos : pos + length]
        pos += length


def test_sigterm_saves_every_message_it_acknowledged(tmp_path: Path) -> None:
    """A publisher flooding QoS 1 while the broker gets SIGTERM: every message it got a PUBACK for is in the
    saved state (queued for an offline persistent subscriber), and it is told "server shutting down"."""
    import json

    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    b = EmbeddedBroker(tmp_path / "broker").start()
    try:
        keeper = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id="keeper", protocol=mqtt.MQTTv5)
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = 3600
        keeper.connect("127.0.0.1", b.port, clean_start=False, properties=props)
        keeper.loop_start()
        subscribed = threading.Event()
        keeper.on_subscribe = lambda *_a: subscribed.set()
        keeper.subscribe("flood/#", qos=1)
        assert subscribed.wait(5)
        keeper.disconnect()  # the session stays: everything published from here on is queued for it
        keeper.loop_stop()

        total = 20_000
        with socket.create_connection(("127.0.0.1", b.port), timeout=10) as s:
            body = b"\x00\x04MQTT\x05\x02\x00\x3c\x00" + b"\x00\x07flooder"
            s.sendall(bytes([0x10, len(body)]) + body)
            assert s.recv(64)[0] >> 4 == 2  # CONNACK
            received = bytearray()

            def read() -> None:
                with contextlib.suppress(OSError):
                    while chunk := s.recv(65536):
                        received.extend(chunk)

            reader = threading.Thread(target=read)
            reader.start()

            def flood() -> None:
                with contextlib.suppress(OSError):
                    for i in range(1, total + 1):
                        var = b"\x00\x07flood/x" + struct.pack("!H", i % 65535 or 1) + b"\x00"
                        payload = str(i).encode()
                        s.sendall(bytes([0x32, len(var) + len(payload)]) + var + payload)

            flooder = threading.Thread(target=flood)
            flooder.start()
            assert wait_for(lambda: len(received) > 4 * 2000, 20), "the broker acknowledged nothing"
            b.stop()  # SIGTERM mid-flood
            flooder.join(20)
            reader.join(20)
        acked = {struct.unpack("!H", body[:2])[0] for kind, body in _packets(bytes(received)) if kind == 4}
        ends = [body for kind, body in _packets(bytes(received)) if kind == 14]
    finally:
        b.stop()
    state = json.loads((tmp_path / "broker" / "state.json").read_text())
    kept = next(x for x in state["sessions"] if x["client_id"] == "keeper")
    saved = {int(base64.b64decode(m["payload"])) for m in kept["messages"]}
    assert 2000 < len(acked) < total, "SIGTERM did not land mid-flood"
    missing = sorted(acked - saved)
    assert not missing, f"{len(missing)} acknowledged messages not saved, e.g. {missing[:5]}"
    assert ends and ends[-1][:1] == b"\x8b", "no DISCONNECT 'server shutting down'"
