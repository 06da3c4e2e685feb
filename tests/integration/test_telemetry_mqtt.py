"""Telemetry end to end through a real Mosquitto: agent spool -> broker -> controller ingestion."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from sqlalchemy import create_engine

from edgefleet.cloud._telemetry import Ingester, Parsed, TelemetryStore
from edgefleet.cloud._telemetry import parse_broker_url as cloud_url
from edgefleet.edge._telemetry import (
    Encoding,
    Identity,
    MqttPublisher,
    Priority,
    Spool,
    SwapPhase,
    TelemetryAgent,
    TelemetryConfig,
    parse_broker_url,
)
from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk import PipelineStats, StreamStats

from .telemetry_broker import EmbeddedBroker, Mosquitto, free_port, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(params=["mosquitto", "embedded"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Mosquitto | EmbeddedBroker]:
    """Every test runs against Mosquitto and against the embedded broker ``make demo`` falls back to."""
    m = (Mosquitto if request.param == "mosquitto" else EmbeddedBroker)(tmp_path / "broker").start()
    yield m
    m.stop()


@pytest.fixture
def store(tmp_path: Path) -> TelemetryStore:
    return TelemetryStore(create_engine(f"sqlite:///{tmp_path / 'controller.db'}"))


class Arrivals:
    """Sequence numbers in the order the ingester stored them, per device and kind."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by: dict[tuple[str, str], list[int]] = defaultdict(list)

    def __call__(self, batch: list[Parsed]) -> None:
        with self.lock:
            for p in batch:
                self.by[(p.device_id, p.kind)].append(p.sequence)

    def get(self, device: str, kind: str) -> list[int]:
        with self.lock:
            return list(self.by[(device, kind)])


def ingester(url: str, store: TelemetryStore, arrivals: Arrivals | None = None, **kw: object) -> Ingester:
    ing = Ingester(cloud_url(url), store, on_stored=arrivals, compact_every_s=None, **kw)  # type: ignore[arg-type]
    ing.start()
    assert ing.wait_subscribed(10), "ingester did not subscribe"
    return ing


def publisher(url: str, device: str, spool: Spool | None = None, **kw: Any) -> MqttPublisher:
    return MqttPublisher(
        parse_broker_url(url),
        Identity("itest", device),
        spool if spool is not None else Spool(":memory:"),
        backoff_s=(0.05, 0.5),
        connect_timeout_s=2.0,
        **kw,
    )


def telemetry(fps: float = 25.0) -> pb.Telemetry:
    msg = pb.Telemetry(interval_s=0.04)
    p = msg.pipelines.add(name="default", fps=fps, model_version="det:1.0.0")
    p.latency.p95_ms = 12.5
    return msg


def test_broker_restart_every_message_exactly_once_in_order(broker: Mosquitto, store: TelemetryStore) -> None:
    arrivals = Arrivals()
    ing = ingester(broker.url, store, arrivals, client_id="itest-restart")
    devices = ["cam-a", "cam-b"]
    pubs = {d: publisher(broker.url, d) for d in devices}
    sent: dict[str, list[int]] = {d: [] for d in devices}
    stop = threading.Event()

    def run(device: str) -> None:
        while not stop.is_set():
            sent[device].append(pubs[device].publish("telemetry", telemetry(), Priority.ROUTINE))
            time.sleep(0.04)  # 25 messages/s per device

    try:
        for p in pubs.values():
            p.start()
        threads = [threading.Thread(target=run, args=(d,)) for d in devices]
        for t in threads:
            t.start()
        time.sleep(1.5)
        broker.stop()  # saves the ingester's persistent session and what is queued for it
        time.sleep(2.0)  # agents spool meanwhile
        broker.start()
        time.sleep(2.0)
        stop.set()
        for t in threads:
            t.join(5)
        for p in pubs.values():
            assert p.flush(20), "spool did not drain after the broker came back"
        total = sum(len(v) for v in sent.values())
        assert wait_for(lambda: sum(len(arrivals.get(d, "telemetry")) for d in devices) >= total, 20)
    finally:
        stop.set()
        for p in pubs.values():
            p.stop(2)
        ing.stop()
    for d in devices:
        assert len(sent[d]) > 60
        assert arrivals.get(d, "telemetry") == sent[d], "stored out of order, twice, or not at all"
        assert store.sequences(d, "telemetry") == sent[d]
    assert pubs["cam-a"].stats().connections >= 2


def test_telemetry_sent_before_any_controller_subscribes_waits_for_one(
    broker: Mosquitto, store: TelemetryStore
) -> None:
    """The broker answers PUBACK "no matching subscribers" (0x10) while no controller has subscribed: the
    agent keeps those messages, probes, and delivers every one in order once a controller subscribes."""
    pub = MqttPublisher(
        parse_broker_url(broker.url),
        Identity("itest", "cam-early"),
        Spool(":memory:"),
        backoff_s=(0.05, 0.5),
        hold_s=0.2,
    )
    arrivals = Arrivals()
    ing: Ingester | None = None
    try:
        pub.start()
        sent = [pub.publish("telemetry", telemetry(), Priority.ROUTINE) for _ in range(30)]
        assert wait_for(lambda: pub.stats().held > 0, 10), "the broker never said nobody had them"
        time.sleep(0.5)
        assert len(pub.spool) >= len(sent), "messages nobody received left the spool"  # + maybe its status
        ing = ingester(broker.url, store, arrivals, client_id="itest-late")
        assert pub.flush(20), "held messages were not delivered after a controller subscribed"
        assert wait_for(lambda: len(arrivals.get("cam-early", "telemetry")) >= len(sent), 10)
    finally:
        pub.stop(2)
        if ing is not None:
            ing.stop()
    assert arrivals.get("cam-early", "telemetry") == sent
    assert store.sequences("cam-early", "telemetry") == sent


def test_ingester_says_once_that_its_broker_is_unreachable(
    store: TelemetryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A controller pointed at a broker that is not there used to retry in silence, even at DEBUG."""
    ing = Ingester(cloud_url(f"mqtt://127.0.0.1:{free_port()}"), store, compact_every_s=None)
    ing.start()
    try:

        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]

        assert wait_for(said, 10), "nothing said about the unreachable broker"
        time.sleep(1.5)  # several retries (backoff 0.1..5 s)
        assert len(said()) == 1, said()
    finally:
        ing.stop(1)


def test_agent_on_dead_port_spools_then_replays_in_order(tmp_path: Path, store: TelemetryStore) -> None:
    port = free_port()  # nothing listens here yet
    url = f"mqtt://127.0.0.1:{port}"
    spool = Spool(tmp_path / "spool.db")
    pub = publisher(url, "cam-offline", spool)
    pub.start()
    try:
        sent = [pub.publish("telemetry", telemetry(), Priority.ROUTINE) for _ in range(30)]
        time.sleep(0.5)
        assert len(spool) == 30
        assert pub.stats().connect_failures >= 1
        mq = Mosquitto(tmp_path / "late-broker", port=port).start()
        try:
            arrivals = Arrivals()
            ing = ingester(url, store, arrivals, client_id="itest-late")
            try:
                assert pub.flush(15)
                assert wait_for(lambda: len(arrivals.get("cam-offline", "telemetry")) >= 30, 10)
                assert arrivals.get("cam-offline", "telemetry") == sent
            finally:
                pub.stop(3)
                ing.stop()
        finally:
            mq.stop()
    finally:
        pub.stop(0.5)
        spool.close()


def test_full_spool_drops_only_low_priority_and_counts(tmp_path: Path, store: TelemetryStore) -> None:
    port = free_port()
    url = f"mqtt://127.0.0.1:{port}"
    spool = Spool(tmp_path / "small.db", max_entries=20)
    pub = publisher(url, "cam-full", spool)
    pub.start()
    swaps, routine = [], []
    for i in range(40):
        routine.append(pub.publish("telemetry", telemetry(), Priority.ROUTINE))
        if i % 4 == 0:
            pub.publish("events", pb.Event(detections=pb.Event.Detections(stream_id="s0")), Priority.BULK)
        if i % 8 == 0:
            ev = pb.Event(swap=pb.Event.Swap(pipeline="default", phase=SwapPhase.PHASE_SUCCEEDED))
            swaps.append(pub.publish("events", ev, Priority.CRITICAL))
    st = spool.stats()
    assert st.pending == 20
    assert st.dropped == {"bulk": 10, "routine": 25, "critical": 0}
    mq = Mosquitto(tmp_path / "broker", port=port).start()
    arrivals = Arrivals()
    ing = ingester(url, store, arrivals, client_id="itest-full")
    try:
        assert pub.flush(15), (pub.stats(), ing.stats())
        # On connect the agent spools its ONLINE status (critical) into the full spool: one more routine
        # entry makes room for it.
        assert wait_for(lambda: len(arrivals.get("cam-full", "telemetry")) >= 14, 10)
        assert wait_for(lambda: len(arrivals.get("cam-full", "events")) >= 5, 10)
        assert wait_for(lambda: len(arrivals.get("cam-full", "status")) >= 1, 10)
        assert arrivals.get("cam-full", "events") == swaps  # every swap event survived, in order
        assert arrivals.get("cam-full", "telemetry") == routine[-14:]  # the newest routine ones
        assert spool.stats().dropped == {"bulk": 10, "routine": 26, "critical": 0}
    finally:
        pub.stop(2)
        ing.stop()
        mq.stop()
        spool.close()


def mosquitto_pub(port: int, topic: str, payload: bytes) -> None:
    subprocess.run(
        ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-V", "mqttv5", "-q", "1", "-t", topic, "-s"],
        input=payload,
        check=True,
        timeout=10,
    )


def test_bad_payloads_rejected_and_counted_ingestion_continues(broker: Mosquitto, store: TelemetryStore) -> None:
    arrivals = Arrivals()
    ing = ingester(broker.url, store, arrivals, client_id="itest-bad", max_payload_bytes=4096)
    pub = publisher(broker.url, "cam-good")
    pub.start()
    try:
        first = pub.publish("telemetry", telemetry(), Priority.ROUTINE)
        assert pub.flush(5)
        base = "edgefleet/v1/itest/cam-good"
        good_header = {"deviceId": "cam-good", "fleet": "itest", "sequence": "1"}
        mosquitto_pub(broker.port, f"{base}/telemetry", b"{not json")  # malformed
        mosquitto_pub(broker.port, f"{base}/telemetry", b"\xff\xfe\x00")  # not UTF-8
        mosquitto_pub(broker.port, f"{base}/telemetry", b"{" + b" " * 5000 + b"}")  # oversized
        bogus = {"header": good_header, "bogus": 1}
        mosquitto_pub(broker.port, f"{base}/telemetry", json.dumps(bogus).encode())  # unknown field
        wrong = {"header": {**good_header, "deviceId": "someone-else"}}
        mosquitto_pub(broker.port, f"{base}/status", json.dumps(wrong).encode())  # header/topic mismatch
        mosquitto_pub(broker.port, f"{base}/events", json.dumps({"header": good_header}).encode())  # no kind
        mosquitto_pub(broker.port, "edgefleet/v1/itest/cam-good/nonsense", b"{}")  # not subscribed to
        mosquitto_pub(broker.port, "edgefleet/v1/itest/Not A Device/telemetry", b"{}")  # not a device id
        last = pub.publish("telemetry", telemetry(), Priority.ROUTINE)
        assert pub.flush(5)
        assert wait_for(lambda: ing.stats().rejected_total >= 7 and len(arrivals.get("cam-good", "telemetry")) >= 2, 10)
    finally:
        pub.stop(2)
        ing.stop()
    assert ing.stats().rejected == {"malformed": 2, "oversized": 1, "schema": 2, "wrong_device": 1, "topic": 1}
    assert arrivals.get("cam-good", "telemetry") == [first, last]


def test_unforeseen_validator_and_callback_failures_do_not_stop_ingestion(
    broker: Mosquitto, store: TelemetryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: the validator raises something it never should on one payload, and the on_stored
    consumer fails once. The payload is counted 'internal' and dropped; everything else is stored."""
    from edgefleet.cloud._telemetry import _ingest

    real = _ingest.parse_message

    def buggy(topic: str, payload: bytes, *args: object) -> Parsed:
        if b"boom" in payload:
            raise RuntimeError("a validator bug")
        return real(topic, payload, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_ingest, "parse_message", buggy)
    arrivals = Arrivals()
    calls = {"n": 0}

    def flaky(batch: list[Parsed]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("a consumer bug")
        arrivals(batch)

    ing = Ingester(cloud_url(broker.url), store, on_stored=flaky, compact_every_s=None, client_id="itest-bug")
    ing.start()
    assert ing.wait_subscribed(10)
    pub = publisher(broker.url, "cam-bug")
    pub.start()
    try:
        first = pub.publish("telemetry", telemetry(), Priority.ROUTINE)
        assert pub.flush(5)
        assert wait_for(lambda: calls["n"] >= 1, 10)
        mosquitto_pub(broker.port, "edgefleet/v1/itest/cam-bug/telemetry", b'{"boom": 1}')
        last = pub.publish("telemetry", telemetry(), Priority.ROUTINE)
        assert pub.flush(5)
        assert wait_for(lambda: len(arrivals.get("cam-bug", "telemetry")) >= 1 and ing.stats().rejected_total >= 1, 10)
    finally:
        pub.stop(2)
        ing.stop()
    assert ing.stats().rejected == {"internal": 1}
    assert ing.stats().state.value == "stopped"
    assert store.sequences("cam-bug", "telemetry") == [first, last]  # the first was stored before its callback failed
    assert arrivals.get("cam-bug", "telemetry") == [last]


def test_backlog_drains_through_buffered_reads_without_stalling(broker: Mosquitto, store: TelemetryStore) -> None:
    """3,000 messages wait in the broker for the ingester's persistent session, then arrive back to back:
    many packets per socket read. Every one is stored, promptly (a packet left in the read buffer
    would wait for the next keepalive, 30 s)."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    from edgefleet.cloud._telemetry._buffered_client import BufferedClient

    first = ingester(broker.url, store, client_id="itest-backlog")
    first.stop()  # the broker keeps the session and queues what comes next
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    n = 3000
    try:
        infos = []
        for seq in range(1, n + 1):
            msg = telemetry()
            msg.header.device_id, msg.header.fleet, msg.header.sequence = "cam-backlog", "itest", seq
            body = json_format.MessageToJson(msg, indent=None).encode()
            infos.append(client.publish("edgefleet/v1/itest/cam-backlog/telemetry", body, qos=1))
        for info in infos:
            info.wait_for_publish(10)
    finally:
        client.disconnect()
        client.loop_stop()
    t0 = time.monotonic()
    ing = ingester(broker.url, store, client_id="itest-backlog", batch_max=500)
    try:
        assert isinstance(ing._client, BufferedClient)
        assert wait_for(lambda: ing.stats().stored >= n, 20), f"{ing.stats().stored} of {n} stored"
        assert time.monotonic() - t0 < 15
    finally:
        ing.stop()
    assert store.sequences("cam-backlog", "telemetry") == list(range(1, n + 1))


def fake_stats() -> PipelineStats:
    stream = StreamStats(
        "rtsp://admin:hunter2@10.0.0.5/live",
        True,
        300,
        298,
        25.0,
        2,
        1,
        0,
        0.0,
        0,
        20.0,
        31.5,
        40.0,
        True,
        False,
        None,
        "det:1.0.0",
    )
    return PipelineStats(
        elapsed_s=12.0,
        frames_in=300,
        results=298,
        fps=25.0,
        dropped=2,
        streams={stream.stream_id: stream},
        stages={},
        queues={"infer": 1},
        copies={"counts": {"host_to_device": 0}, "bytes": {}},
        copies_per_frame=0.0,
        batches=150,
        mean_batch=2.0,
        model="det:1.0.0",
    )


def test_mosquitto_sub_reads_json_telemetry_valid_against_schema(
    broker: Mosquitto, store: TelemetryStore, tmp_path: Path
) -> None:
    sub = subprocess.Popen(
        [
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-p",
            str(broker.port),
            "-V",
            "mqttv5",
            "-q",
            "1",
            "-t",
            "edgefleet/v1/itest/cam-json/telemetry",
            "-C",
            "2",
            "-W",
            "20",
            "-F",
            "%C\t%p",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)
    cfg = TelemetryConfig(
        fleet="itest",
        device_id="cam-json",
        broker=broker.url,
        interval_s=0.2,
        gpu="none",
        spool_path=tmp_path / "agent-spool.db",
        prometheus_port=0,
    )
    ing = ingester(broker.url, store, client_id="itest-json")
    agent = TelemetryAgent(cfg, agent_version="0.1.0")
    agent.add_pipeline("default", fake_stats)
    agent.start()
    try:
        out, _ = sub.communicate(timeout=25)
        assert agent.metrics is not None
        body = urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics.port}/metrics", timeout=5).read().decode()
        assert wait_for(lambda: store.health("cam-json", 60).samples >= 2, 10)
    finally:
        agent.stop()
        ing.stop()
    lines = [line for line in out.splitlines() if line]
    assert len(lines) == 2
    for line in lines:
        ctype, payload = line.split("\t", 1)
        assert ctype == "application/json"
        msg = json_format.Parse(payload, pb.Telemetry())  # strict: unknown fields fail
        assert msg.header.device_id == "cam-json" and msg.header.fleet == "itest" and msg.header.sequence > 0
        assert msg.header.models[0].name == "det" and msg.header.models[0].version == "1.0.0"
        stream = msg.pipelines[0].streams[0]
        assert stream.stream_id == "rtsp://admin:***@10.0.0.5/live"  # credentials never leave the device
        assert msg.system.ram_total_bytes > 0 and msg.system.cpu_per_core_pct
    assert 'edgefleet_pipeline_fps{pipeline="default"} 25.0' in body
    assert "hunter2" not in body
    health = store.health("cam-json", 60)
    assert health.fps == pytest.approx(25.0) and health.p95_ms == pytest.approx(31.5)
    assert store.device("cam-json") is not None and not health.online  # stop() published OFFLINE


_AGENT = """
import sys, time
from edgefleet.edge._telemetry import Identity, MqttPublisher, Spool, parse_broker_url
pub = MqttPublisher(parse_broker_url(sys.argv[1]), Identity("itest", "cam-will"), Spool(":memory:"))
pub.start()
while pub.state.value != "connected" or len(pub.spool):
    time.sleep(0.02)
print("ready", flush=True)
time.sleep(60)
"""


def test_last_will_marks_a_killed_agent_offline(broker: Mosquitto, store: TelemetryStore) -> None:
    ing = ingester(broker.url, store, client_id="itest-will")
    proc = subprocess.Popen([sys.executable, "-c", _AGENT, broker.url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert wait_for(lambda: store.health("cam-will", 60).online, 10)
        proc.kill()  # no DISCONNECT: the broker publishes the Last Will
        proc.wait(5)
        assert wait_for(lambda: not store.health("cam-will", 60).online, 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()
        ing.stop()
    wills = [m["message"] for m in store.recent("cam-will", 60, kind="status") if m["message"].get("lastWill")]
    assert len(wills) == 1 and wills[0]["state"] == "STATE_OFFLINE"


def test_two_replicas_share_binary_telemetry_each_message_once(broker: Mosquitto, store: TelemetryStore) -> None:
    """Two ingest replicas on the shared subscription; protobuf payloads are stored as received."""
    arrivals = Arrivals()
    a = ingester(broker.url, store, arrivals, client_id="itest-share-a")
    b = ingester(broker.url, store, arrivals, client_id="itest-share-b")
    pub = MqttPublisher(
        parse_broker_url(broker.url), Identity("itest", "cam-pb"), Spool(":memory:"), encoding=Encoding.PROTOBUF
    )
    sent: list[int] = []
    try:
        pub.start()
        for i in range(200):
            sent.append(pub.publish("telemetry", telemetry(fps=float(i)), Priority.ROUTINE))
        swap = pb.Event(swap=pb.Event.Swap(pipeline="default", phase=SwapPhase.PHASE_ROLLED_BACK))
        sent_swap = pub.publish("events", swap, Priority.CRITICAL)
        assert pub.flush(20)
        assert wait_for(lambda: len(arrivals.get("cam-pb", "telemetry")) >= 200, 20)
        assert wait_for(lambda: len(arrivals.get("cam-pb", "events")) == 1, 10)
    finally:
        pub.stop(2)
        a.stop()
        b.stop()
    assert a.stats().stored > 0 and b.stats().stored > 0, "the shared subscription did not split the load"
    assert all(a.stats().cpu_s[stage] > 0 for stage in ("parse", "store", "ack"))  # per-stage CPU is counted
    statuses = store.sequences("cam-pb", "status")  # ONLINE, and OFFLINE when it made it before the replicas left
    assert len(statuses) in (1, 2) and a.stats().stored + b.stats().stored == 200 + 1 + len(statuses)
    assert store.sequences("cam-pb", "telemetry") == sent
    last = store.recent("cam-pb", 60, kind="telemetry")[-1]["message"]
    assert last["pipelines"][0] == {
        "name": "default",
        "fps": 199.0,
        "modelVersion": "det:1.0.0",
        "latency": {"p95Ms": 12.5},
    }
    (event,) = store.recent("cam-pb", 60, kind="events")
    assert event["seq"] == sent_swap and event["message"]["swap"]["phase"] == "PHASE_ROLLED_BACK"
    assert store.health("cam-pb", 60).errors == 1  # the rollback counts


@contextlib.contextmanager
def watching(port: int) -> Iterator[None]:
    """A plain subscriber on everything: the broker answers every PUBACK with success from now on."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    c.connect("127.0.0.1", port)
    c.loop_start()
    c.subscribe("edgefleet/v1/#", qos=1)
    time.sleep(0.3)
    try:
        yield
    finally:
        c.disconnect()
        c.loop_stop()


def test_a_watchers_puback_deletes_nothing_until_a_controller_stored_it(
    broker: Mosquitto, store: TelemetryStore
) -> None:
    """With a watcher subscribed and no controller, every PUBACK says success: the spool keeps all of it
    (before, the agent deleted it and it was lost), and a controller that comes later gets all of it."""
    pub = publisher(broker.url, "cam-watched", ack_timeout_s=1.0)
    arrivals = Arrivals()
    ing: Ingester | None = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(watching(broker.port))
        stack.callback(pub.stop, 2)
        stack.callback(lambda: ing is not None and ing.stop())
        pub.start()
        sent = [pub.publish("telemetry", telemetry(), Priority.ROUTINE) for _ in range(20)]
        assert wait_for(lambda: pub.stats().sent >= 20, 10)
        time.sleep(0.5)
        assert len(pub.spool) >= 20 and pub.stats().held == 0  # the broker said delivered; the spool disagrees
        ing = ingester(broker.url, store, arrivals, client_id="itest-watched")
        assert pub.flush(30), pub.stats()  # re-sent after the acknowledgement timeout, then acknowledged
        assert pub.stats().resends >= 1 and pub.stats().spool.acked_seq >= sent[-1]
    assert store.sequences("cam-watched", "telemetry") == sent


def test_broker_delivery_deletes_on_puback_without_any_controller(broker: Mosquitto) -> None:
    """``delivery: broker`` (no edgefleet controller): PUBACK is the proof, nothing waits for an ack."""
    from edgefleet.edge._telemetry import Delivery

    pub = MqttPublisher(
        parse_broker_url(broker.url), Identity("itest", "cam-plain"), Spool(":memory:"), delivery=Delivery.BROKER
    )
    with watching(broker.port):
        try:
            pub.start()
            for _ in range(20):
                pub.publish("telemetry", telemetry(), Priority.ROUTINE)
            assert pub.flush(10)
            assert pub.stats().watermarks == 0 and pub.stats().acked >= 20
        finally:
            pub.stop(2)


def test_a_message_no_controller_can_store_is_given_up_not_held_forever(
    broker: Mosquitto, store: TelemetryStore
) -> None:
    """One message is over the controller's payload limit (rejected before its header can be read): the
    agent sends it three times, sees later ones stored, gives it up and counts it; the rest is stored."""
    arrivals = Arrivals()
    ing = ingester(broker.url, store, arrivals, client_id="itest-huge", max_payload_bytes=2048)
    pub = MqttPublisher(
        parse_broker_url(broker.url), Identity("itest", "cam-huge"), Spool(":memory:"), ack_timeout_s=0.3
    )
    try:
        pub.start()
        before = [pub.publish("telemetry", telemetry(), Priority.ROUTINE) for _ in range(3)]
        huge = pb.Event(error=pb.Event.Error(component="x", message="y" * 4000))
        lost = pub.publish("events", huge, Priority.CRITICAL)
        after = [pub.publish("telemetry", telemetry(), Priority.ROUTINE) for _ in range(3)]
        assert pub.flush(30), pub.stats()
    finally:
        pub.stop(2)
        ing.stop()
    assert pub.stats().rejected == 1 and ing.stats().rejected.get("oversized", 0) >= 3
    assert store.sequences("cam-huge", "telemetry") == before + after
    assert lost not in store.sequences("cam-huge")
