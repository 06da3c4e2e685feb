"""Controller side: payload validation, dedup, device state from status/Last Will, health, retention."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf import json_format
from sqlalchemy import create_engine, text

from edgefleet.cloud._telemetry import Parsed, Rejected, TelemetryStore, parse_message
from edgefleet.edge._telemetry._messages import Encoding, Identity, encode, stamp
from edgefleet.proto.v1 import telemetry_pb2 as pb

ME = Identity("f1", "dev1")
T = "edgefleet/v1/f1/dev1"
PB = "application/x-protobuf"


def payload(msg: object, seq: int, enc: Encoding = Encoding.JSON, now: float | None = None) -> bytes:
    stamp(msg, ME, seq, [], now=now)
    return encode(msg, enc)  # type: ignore[arg-type]


def telem(seq: int, fps: float, p95: float, errors: int = 0, now: float | None = None) -> Parsed:
    m = pb.Telemetry()
    p = m.pipelines.add(name="default", fps=fps, errors=errors)
    p.latency.p95_ms = p95
    return parse_message(f"{T}/telemetry", payload(m, seq, now=now), "application/json", 65536)


def status(seq: int, state: int, started: float, conn: int, will: bool = False) -> Parsed:
    m = pb.Status(state=state, connection=conn, last_will=will)  # type: ignore[arg-type]
    m.started_at.FromNanoseconds(int(started * 1e9))
    return parse_message(f"{T}/status", payload(m, seq), "application/json", 65536)


@pytest.mark.parametrize(
    ("topic", "body", "ctype", "reason"),
    [
        (f"{T}/telemetry", b"{oops", None, "malformed"),
        (f"{T}/telemetry", b"\x80\x81", None, "malformed"),
        (f"{T}/telemetry", b"\x08\x96\x01\xff", "application/x-protobuf", "malformed"),
        (f"{T}/telemetry", b"[]", None, "schema"),
        (
            f"{T}/telemetry",
            b'{"header": {"deviceId": "dev1", "fleet": "f1", "sequence": "1"}, "x": 1}',
            None,
            "schema",
        ),
        (f"{T}/telemetry", b'{"header": {"deviceId": "dev1", "fleet": "f1"}}', None, "schema"),
        (f"{T}/status", b'{"header": {"deviceId": "dev2", "fleet": "f1", "sequence": "1"}}', None, "wrong_device"),
        (f"{T}/telemetry", b" " * 70000, None, "oversized"),
        (f"{T}/telemetry", b"[" * 5000, None, "malformed"),  # nested past the interpreter's stack
        # valid protobuf, but past the database's integer columns (it failed every batch it was in)
        (
            f"{T}/status",
            b'{"header": {"deviceId": "dev1", "fleet": "f1", "sequence": "9223372036854775808"}}',
            None,
            "schema",
        ),
        (
            f"{T}/status",
            b'{"header": {"deviceId": "dev1", "fleet": "f1", "sequence": "1"}, "connection": "2147483648"}',
            None,
            "schema",
        ),
        (
            f"{T}/status",
            b'{"header": {"deviceId": "dev1", "fleet": "f1", "sequence": "1"}, "state": "\\ud800"}',
            None,
            "schema",
        ),
        ("edgefleet/v1/f1/dev1", b"{}", None, "topic"),
        ("other/v1/f1/dev1/status", b"{}", None, "topic"),
        # ids an agent cannot have were stored as devices ('..', 'MQ 1', 5000 characters)
        ("edgefleet/v1/f1/../telemetry", b"{}", None, "topic"),
        ("edgefleet/v1/f1/MQ 1/telemetry", b"{}", None, "topic"),
        (f"edgefleet/v1/f1/{'d' * 5000}/telemetry", b"{}", None, "topic"),
    ],
)
def test_rejections(topic: str, body: bytes, ctype: str | None, reason: str) -> None:
    with pytest.raises(Rejected) as err:
        parse_message(topic, body, ctype, 65536)
    assert err.value.reason == reason


def test_protobuf_and_json_encodings_accepted() -> None:
    m = pb.Event(swap=pb.Event.Swap(pipeline="p", phase=pb.Event.Swap.PHASE_FAILED))
    binary = parse_message(f"{T}/events", payload(m, 7, Encoding.PROTOBUF), "application/x-protobuf", 4096)
    text = parse_message(f"{T}/events", payload(m, 8), "application/json", 4096)
    assert binary.message.swap.phase == text.message.swap.phase == pb.Event.Swap.PHASE_FAILED
    assert json.loads(binary.payload_json)["swap"]["pipeline"] == "p"


def test_binary_payloads_are_stored_as_received_and_read_as_json(tmp_path: Path) -> None:
    store = TelemetryStore(create_engine(f"sqlite:///{tmp_path / 't.db'}"))
    m = pb.Telemetry(interval_s=10.0)
    m.pipelines.add(name="default", fps=29.5, errors=2).latency.p95_ms = 41.0
    m.system.cpu_per_core_pct.extend([1.5, float("nan")])
    body = payload(m, 3, Encoding.PROTOBUF)
    p = parse_message(f"{T}/telemetry", body, "application/x-protobuf", 4096)
    assert store.write([p]).stored == 1
    with store.engine.connect() as c:
        assert c.execute(text("SELECT payload, payload_pb FROM telemetry_messages")).one() == ("", body)
    (row,) = store.recent("dev1", 0)
    assert row["message"] == json.loads(json_format.MessageToJson(m))  # what was stored before: the JSON mapping
    assert row["message"]["system"]["cpuPerCorePct"] == [1.5, "NaN"]
    h = store.health("dev1", 0)
    assert (h.fps, h.p95_ms, h.errors, h.samples) == (29.5, 41.0, 0, 1)
    assert json.loads(p.payload_json)["pipelines"][0]["fps"] == 29.5  # `telemetry tail --json`


def test_an_old_telemetry_table_gets_the_new_column(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 't.db'}")
    TelemetryStore(engine)
    with engine.begin() as c:
        c.execute(text("ALTER TABLE telemetry_messages DROP COLUMN payload_pb"))
    store = TelemetryStore(engine)  # create=True: adds what is missing
    m = pb.Event(error=pb.Event.Error(component="camera", message="gone"))
    assert store.write([parse_message(f"{T}/events", payload(m, 1, Encoding.PROTOBUF), PB, 4096)]).stored == 1
    assert store.recent("dev1", 0)[0]["message"]["error"] == {"component": "camera", "message": "gone"}


@pytest.fixture
def store(tmp_path: Path) -> TelemetryStore:
    return TelemetryStore(create_engine(f"sqlite:///{tmp_path / 't.db'}"))


def test_dedup_and_health(store: TelemetryStore) -> None:
    first = store.write([telem(1, 30.0, 20.0, 0), telem(2, 20.0, 50.0, 1), telem(2, 20.0, 50.0, 1)])
    assert (first.stored, first.duplicates) == (2, 1)
    again = store.write([telem(2, 20.0, 50.0, 1), telem(3, 25.0, 10.0, 3)])
    assert (again.stored, again.duplicates) == (1, 1)
    failed = pb.Event(swap=pb.Event.Swap(phase=pb.Event.Swap.PHASE_ROLLED_BACK))
    store.write([parse_message(f"{T}/events", payload(failed, 4), None, 4096)])
    h = store.health("dev1", timedelta(minutes=5))
    assert h.fps == pytest.approx(25.0) and h.p95_ms == 50.0
    assert h.errors == 3 + 1  # counter went 0 -> 3, plus one rollback event
    assert h.samples == 3 and store.sequences("dev1") == [1, 2, 3, 4]
    assert store.health("nobody", datetime.now(UTC) - timedelta(hours=1)).fps is None


def test_online_state_follows_status_and_last_will(store: TelemetryStore) -> None:
    t0 = time.time()
    # The will of connection 1 is reserved (seq 1) before connection 1's ONLINE (seq 2).
    store.write([status(2, pb.Status.STATE_ONLINE, t0, 1)])
    assert store.health("dev1", 60).online
    store.write([status(1, pb.Status.STATE_OFFLINE, t0, 1, will=True)])  # connection 1 dies
    assert not store.health("dev1", 60).online
    store.write([status(4, pb.Status.STATE_ONLINE, t0, 2)])  # reconnect
    store.write([status(3, pb.Status.STATE_OFFLINE, t0, 1, will=True)])  # a stale will, replayed: ignored
    assert store.health("dev1", 60).online
    store.write([status(10, pb.Status.STATE_ONLINE, t0 + 100, 1)])  # agent restarted: counter reset
    assert store.device("dev1") is not None and store.health("dev1", 60).online


def test_retention_folds_old_telemetry_into_rollups(store: TelemetryStore) -> None:
    now = time.time()
    old = now - 2 * 86400
    store.write([telem(i, 10.0 * i, 5.0 * i, i, now=old + i) for i in range(1, 5)])
    store.write([telem(10, 40.0, 1.0, 4, now=now)])
    removed = store.compact(raw_retention_s=86400, bucket_s=60, now=now)
    assert removed == 4
    assert store.sequences("dev1") == [10]
    h = store.health("dev1", old - 60)
    assert h.samples == 5 and h.p95_ms == 20.0
    assert h.fps == pytest.approx((10 + 20 + 30 + 40 + 40) / 5)
    store.compact(raw_retention_s=86400, rollup_retention_s=3600, now=now)  # rollups expire too
    assert store.health("dev1", old - 60).samples == 1
