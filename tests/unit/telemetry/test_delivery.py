"""Controller-acknowledged delivery, part by part: the spool's chain and trim, ``header.prev`` on the wire,
the sender's acknowledgement tracking, the controller's watermark (one store, and two replicas writing in
any order), coalesced acknowledgements and rejection warnings. End to end: tests/integration/
test_telemetry_delivery.py and test_telemetry_mqtt.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from google.protobuf import json_format
from sqlalchemy import create_engine

from edgefleet.cloud._telemetry import Parsed, Rejected, TelemetryStore, parse_message
from edgefleet.cloud._telemetry._acks import AckPublisher
from edgefleet.cloud._telemetry._rejections import RejectionLog
from edgefleet.cloud._telemetry._write import advance
from edgefleet.edge._telemetry import Priority, Spool
from edgefleet.edge._telemetry._delivery import AckTracker
from edgefleet.edge._telemetry._messages import Encoding, Identity, encode, parse_ack, stamp, with_prev
from edgefleet.proto.v1 import telemetry_pb2 as pb

ME = Identity("f1", "dev1")
T = "edgefleet/v1/f1/dev1"


def _append(spool: Spool, n: int, priority: Priority = Priority.ROUTINE) -> list[int]:
    return [spool.append(priority, f"{T}/telemetry", lambda s: str(s).encode()) for _ in range(n)]


# --- agent side -------------------------------------------------------------------------------------
def test_entries_carry_the_sequence_before_them_and_trim_to_a_watermark(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db")
    seqs = _append(spool, 5)
    entries = spool.read_after(0, 10)
    assert [e.prev for e in entries] == [0, *seqs[:4]]  # 0: nothing older in the spool
    assert spool.read_after(entries[1].id, 1)[0].prev == seqs[1]  # also when read from the middle
    assert spool.trim(seqs[2]) == 3 and len(spool) == 2
    assert spool.read_after(0, 10)[0].prev == 0  # what is stored counts as gone
    assert spool.trim(seqs[1]) == 0  # an older watermark changes nothing
    spool.close()
    again = Spool(tmp_path / "s.db")
    assert again.stats().acked_seq == seqs[2]  # remembered across restarts
    again.close()


def test_a_dropped_entry_leaves_the_chain(tmp_path: Path) -> None:
    spool = Spool(":memory:", max_entries=3)
    bulk = _append(spool, 1, Priority.BULK)
    routine = _append(spool, 3)  # the fourth append drops the bulk entry
    assert spool.stats().dropped["bulk"] == 1
    assert [e.prev for e in spool.read_after(0, 10)] == [0, routine[0], routine[1]]
    assert bulk[0] not in [e.seq for e in spool.read_after(0, 10)]


def test_sequences_skip_past_what_an_earlier_install_had_acknowledged() -> None:
    spool = Spool(":memory:")
    first = _append(spool, 1)[0]
    spool.skip_sequences_to(first + 1000)
    assert _append(spool, 1)[0] == first + 1000
    spool.skip_sequences_to(first)  # never backwards
    assert spool.next_sequence == first + 1001


@pytest.mark.parametrize("enc", list(Encoding))
def test_prev_is_set_on_the_encoded_payload(enc: Encoding) -> None:
    msg = pb.Telemetry(interval_s=1.0)
    msg.pipelines.add(name="default", fps=3.0)
    stamp(msg, ME, 1_800_000_000_000_005, [])
    body = with_prev(encode(msg, enc), enc.content_type, 1_800_000_000_000_001)
    got = pb.Telemetry()
    if enc is Encoding.PROTOBUF:
        got.ParseFromString(body)
    else:
        json_format.Parse(body, got)  # strict: a misplaced member would fail
    assert got.header.prev == 1_800_000_000_000_001 and got.header.HasField("prev")
    assert got.header.sequence == 1_800_000_000_000_005 and got.pipelines[0].fps == 3.0
    stored = parse_message(f"{T}/telemetry", body, enc.content_type, 65536)
    assert stored.facts.prev == 1_800_000_000_000_001


def test_ack_payload_is_read_only_for_its_device() -> None:
    assert parse_ack(b'{"deviceId":"dev1","fleet":"f1","sequence":"12","highest":"20"}', ME) == (12, 20)
    assert parse_ack(b'{"deviceId":"dev1","sequence":"12"}', ME) == (12, 12)
    for bad in (b'{"deviceId":"dev2","sequence":"12"}', b"nope", b"[]", b'{"deviceId":"dev1"}', b"\xff"):
        assert parse_ack(bad, ME) is None


def test_tracker_times_out_backs_off_and_recovers_a_window_at_a_time() -> None:
    t = AckTracker(timeout_s=10.0, window=2)
    for i in range(1, 6):
        t.sent(i, 100 + i, at=0.0)
    assert not t.due(5.0) and t.due(10.5)
    assert t.covered(102) == 2 and t.outstanding == 3
    t.rewound()
    assert t.timeout_s == 20.0 and t.outstanding == 0
    assert t.room(cursor=0) == 2  # sending again: at most a window ahead of the watermark
    t.sent(1, 101, at=11.0)
    t.sent(2, 102, at=11.0)
    assert t.room(cursor=2) == 0
    t.covered(102)
    assert t.timeout_s == 10.0 and t.room(cursor=2) == 2  # progress: the base timeout again
    assert t.room(cursor=5) is None  # past what was sent before: no limit
    for _ in range(5):
        t.rewound()
    assert t.timeout_s == 80.0  # at most 8x


# --- controller side: the watermark ---------------------------------------------------------------
def test_advance_follows_the_chain_in_any_order() -> None:
    assert advance(0, {i: i - 1 for i in range(1, 501)}) == 500
    assert advance(10, {12: 11, 11: 5}) == 12
    assert advance(10, {13: 12}) == 10  # 11 and 12 still to come
    assert advance(10, {13: 12, 12: 0}) == 13  # 12 says nothing between 0 and 12 is pending


def chained(seq: int, prev: int | None, kind: str = "telemetry") -> Parsed:
    msg = pb.Telemetry(interval_s=1.0) if kind == "telemetry" else pb.Status(state=pb.Status.STATE_OFFLINE)
    stamp(msg, ME, seq, [])
    body = encode(msg, Encoding.JSON)
    if prev is not None:
        body = with_prev(body, Encoding.JSON.content_type, prev)
    return parse_message(f"{T}/{kind}", body, "application/json", 65536)


@pytest.fixture
def store(tmp_path: Path) -> TelemetryStore:
    return TelemetryStore(create_engine(f"sqlite:///{tmp_path / 't.db'}"))


def watermark(store: TelemetryStore) -> int:
    state = store.device("dev1")
    return state.acked_seq if state else 0


def test_watermark_follows_what_is_stored_in_order(store: TelemetryStore) -> None:
    res = store.write([chained(s, s - 1 if s > 100 else 0) for s in range(100, 110)])
    assert res.acks == {"dev1": ("f1", 109, 109)} and watermark(store) == 109


def test_two_replicas_storing_in_any_order_stitch_one_chain(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    a, b = TelemetryStore(create_engine(url)), TelemetryStore(create_engine(url))
    odd = [chained(s, s - 1) for s in range(101, 120, 2)]
    even = [chained(s, s - 1) for s in range(102, 121, 2)]
    assert a.write([chained(100, 0)]).acks["dev1"][1] == 100
    assert a.write(odd[5:]).acks["dev1"][1] == 100  # 111.. arrive first: a gap at 102
    assert b.write(even[:3]).acks["dev1"][1] == 100  # 102, 104, 106: 101 is still missing
    assert watermark(a) == 100  # 101 is missing still
    res = a.write(odd[:5])  # 101..109: the chain now runs through b's 102..106 and a's 111..
    assert res.acks["dev1"][1] == 107
    res = b.write(even[3:])
    assert res.acks["dev1"] == ("f1", 120, 120) and watermark(b) == 120


def test_a_copy_sent_again_reaches_further_back_and_unblocks(store: TelemetryStore) -> None:
    store.write([chained(100, 0), chained(103, 102)])  # 101 and 102 were sent, then lost
    assert watermark(store) == 100
    res = store.write([chained(103, 100)])  # the agent dropped them meanwhile; 103 sent again
    assert res.stored == 0 and res.duplicates == 1 and res.acks["dev1"][1] == 103  # re-acknowledged
    assert store.write([chained(103, 102)]).acks["dev1"][1] == 103  # a larger prev changes nothing


def test_unchained_messages_never_move_the_watermark(store: TelemetryStore) -> None:
    store.write([chained(100, 0)])
    res = store.write([chained(500, None, "status")])  # a Last Will: reserved number, never spooled
    assert res.stored == 1 and "dev1" not in res.acks and watermark(store) == 100
    assert store.write([chained(101, 100)]).acks["dev1"] == ("f1", 101, 500)  # highest stored: 500


def test_a_rejected_message_with_a_readable_header_does_not_block_the_chain(store: TelemetryStore) -> None:
    msg = pb.Event()  # no kind: rejected, but its header says where it sits in the chain
    stamp(msg, ME, 101, [])
    body = with_prev(encode(msg, Encoding.JSON), "application/json", 100)
    with pytest.raises(Rejected) as err:
        parse_message(f"{T}/events", body, "application/json", 65536)
    assert err.value.reason == "schema" and err.value.link == (101, 100) and err.value.device == "f1/dev1"
    store.write([chained(100, 0), chained(102, 101)], links=[("f1", "dev1", 101, 100)])
    assert watermark(store) == 102 and store.sequences("dev1") == [100, 102]


def test_prev_not_below_sequence_is_rejected() -> None:
    with pytest.raises(Rejected) as err:
        chained(100, 100)
    assert err.value.reason == "schema"


def test_telemetry_under_a_non_device_name_is_rejected() -> None:
    msg = pb.Telemetry()
    stamp(msg, Identity("f1", "ctl"), 1, [])
    with pytest.raises(Rejected) as err:
        parse_message("edgefleet/v1/f1/ctl/telemetry", encode(msg, Encoding.JSON), None, 65536, frozenset({"ctl"}))
    assert err.value.reason == "not_a_device"


# --- acknowledgements and rejections ----------------------------------------------------------------
def test_acknowledgements_are_coalesced_per_device() -> None:
    sent: list[tuple[str, dict[str, str]]] = []
    up = [True]

    def send(topic: str, payload: bytes) -> bool:
        if up[0]:
            sent.append((topic, json.loads(payload)))
        return up[0]

    acks = AckPublisher(send, "r1", interval_s=1.0)
    acks.note({"dev1": ("f1", 5, 5), "dev2": ("f1", 7, 9)})
    assert acks.flush(now=100.0) == 2
    acks.note({"dev1": ("f1", 6, 6)})
    acks.note({"dev1": ("f1", 8, 8)})
    assert acks.flush(now=100.5) == 0  # within the interval: waits, keeping the newest
    up[0] = False
    assert acks.flush(now=101.5) == 0 and acks.pending == 1  # not connected: stays due
    up[0] = True
    assert acks.flush(now=101.6) == 1
    topic, body = sent[-1]
    assert topic == "edgefleet/v1/f1/dev1/ack" and body["sequence"] == "8" and body["replica"] == "r1"
    parsed = json_format.ParseDict(body, pb.Ack())  # the payload is an Ack in protobuf's JSON mapping
    assert parsed.sequence == 8 and parsed.highest == 8


def test_one_warning_per_device_and_reason_per_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = RejectionLog(warn_every_s=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            log.add("malformed", "f1/dev1", "JSON: nope")
        log.add("schema", "f1/dev1", "bad field")
        log.add("malformed", "f1/dev2", "JSON: nope")
        now[0] = 61.0
        log.add("malformed", "f1/dev1", "JSON: again")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines
    assert lines[-1].startswith("telemetry from f1/dev1 rejected (malformed): JSON: again (4 more")
    assert log.counts() == {"malformed": 7, "schema": 1}
    rows = {(r.device, r.reason): r.count for r in log.take()}
    assert rows == {("dev1", "malformed"): 6, ("dev1", "schema"): 1, ("dev2", "malformed"): 1}
    assert log.take() == []


def test_rejection_counts_are_stored_per_device(store: TelemetryStore) -> None:
    log = RejectionLog()
    log.add("malformed", "f1/dev1", "JSON: nope")
    log.add("malformed", "f1/dev1", "JSON: still nope")
    store.record_rejections(log.take())
    log.add("malformed", "f1/dev1", "JSON: third")
    store.record_rejections(log.take())
    got = store.rejections("dev1")
    assert got["malformed"]["count"] == 3 and got["malformed"]["last_detail"] == "JSON: third"
