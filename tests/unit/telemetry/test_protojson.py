"""The compiled JSON validator (``_protojson``) against ``json_format.ParseDict``: the same verdicts and the
same stored facts on the agent's real payloads, on values of every kind in every kind of field, and on
documents generated from the descriptors or mutated from real ones.

The one deliberate difference: where ParseDict raises OverflowError or SystemError instead of ParseError
(a huge integer in a double field, a surrogate where an enum name goes: it crashed the ingest thread),
the validator rejects."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgefleet.cloud._telemetry import Rejected, parse_message
from edgefleet.cloud._telemetry._protojson import Invalid, Unsupported
from edgefleet.cloud._telemetry._validate import _VALIDATORS, KINDS, facts_of_json, facts_of_message
from edgefleet.edge._telemetry import (
    Encoding,
    MqttPublisher,
    Priority,
    Spool,
    SystemSampler,
    TelemetryAgent,
    TelemetryConfig,
)
from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk import Detection, Result
from tests.support.telemetry_stats import pipeline_stats

EXAMPLES = max(300, int(os.environ.get("EDGEFLEET_FUZZ_EXAMPLES", "25")))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Values json.loads can produce that probe every conversion rule (numbers as strings, whitespace, unicode
# digits, NaN spellings, ranges, surrogates, timestamps, wrong containers).
ODD: list[Any] = [
    *(None, "", [], {}, True, False, 0, -1, 1, 7, 77, 2**31, -(2**31) - 1, 2**32, 2**63, 2**64, -(2**63) - 1),
    *(10**400, 1.0, 1.5, -0.0, 1.7, 3.4028234663852886e38, 3.5e38, 1e39, 1e300, float("nan"), float("inf")),
    *(float("-inf"), "1", " 1", "1 ", "\t1", "1_0", "1e3", "1.0", "1.5", "-1", "+1", "0x10", "١٢", "²", "3"),
    *("18446744073709551615", "18446744073709551616", "1e19", "1e400", "1" * 30, "NaN", "nan", "NAN"),
    *("Infinity", "-Infinity", "inf", "true", "false", "STATE_ONLINE", "PHASE_FAILED", "\ud800", "é"),
    *("\ud83d\ude00", "\U0001f600", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.123456789Z"),
    *("2026-02-30T00:00:00Z", "2026-01-01T00:00:60Z", "2026-01-01T24:00:00Z", "2026-01-01T00:00:00+01:00"),
    *("2026-01-01T00:00:00-01:30", "2026-01-01 00:00:00Z", "0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z"),
    *("9999-12-31T23:59:59.999999999Z", "2026-01-01T00:00:00.1234567891Z", "2026-01-01t00:00:00Z"),
    *("2026-1-1T0:0:0Z", "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00Zx", "YWJj", "YWJ", "@@"),
    *([1], ["x"], [None], [{}], [""], {"x": 1}, {"": None}, {"k": None}, {"k": "v"}, {"k": 1.5}, {"k": "1"}),
]
_MISSING = object()


def reference(kind: str, obj: Any) -> Any:
    """ParseDict's verdict as stored facts; None when it rejects (or overflows)."""
    msg = KINDS[kind]()
    try:
        json_format.ParseDict(copy.deepcopy(obj), msg)
    except (json_format.ParseError, OverflowError, SystemError):
        return None
    return facts_of_message(kind, msg)


def compiled(kind: str, obj: Any) -> Any:
    try:
        _VALIDATORS[kind](obj)
    except Invalid:
        return None
    except Unsupported:
        return _MISSING
    return facts_of_json(kind, obj)


def assert_agrees(kind: str, obj: Any) -> None:
    got = compiled(kind, obj)
    if got is _MISSING:  # left to ParseDict: only where one field is named twice
        assert _named_twice(obj), obj
        return
    want = reference(kind, obj)
    # repr: NaN figures compare equal
    assert repr(got) == repr(want), f"{kind} {obj!r}: compiled {got!r}, ParseDict {want!r}"


def _pairs(desc: Descriptor, seen: set[str]) -> set[tuple[str, str]]:
    if desc.full_name in seen:
        return set()
    seen.add(desc.full_name)
    out = {(f.json_name, f.name) for f in desc.fields if f.json_name != f.name}
    for f in desc.fields:
        if f.message_type is not None:
            out |= _pairs(f.message_type, seen)
    return out


NAME_PAIRS = set().union(*(_pairs(cls.DESCRIPTOR, set()) for cls in KINDS.values()))


def _named_twice(obj: Any) -> bool:
    if isinstance(obj, list):
        return any(_named_twice(v) for v in obj)
    if not isinstance(obj, dict):
        return False
    return any(a in obj and b in obj for a, b in NAME_PAIRS) or any(_named_twice(v) for v in obj.values())


# --- the agent's real payloads -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def agent_payloads(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, bytes, str]]:
    """Every kind of message the agent publishes, in both encodings, as its publisher spools them (not
    started: nothing leaves the spool)."""
    out: list[tuple[str, bytes, str]] = []
    for encoding in Encoding:
        tmp = tmp_path_factory.mktemp(f"agent-{encoding.value}")
        cfg = TelemetryConfig(fleet="lab", device_id="cam-1", gpu="none", spool_path=tmp / "spool.db")
        agent = TelemetryAgent(cfg, agent_version="1.4.0", labels={"site": "north", "zone": "é"})
        spool = Spool(tmp / "spool.db")
        pub = MqttPublisher(cfg.broker_address(), agent.identity, spool, encoding=encoding, models=agent.models)
        agent.spool, agent.publisher = spool, pub
        agent.add_pipeline("default", pipeline_stats)
        try:
            agent.publish_telemetry()
            full = agent.sample()  # as on a Jetson: system figures, GPU, named sensors and rails
            sampler = SystemSampler(None, disk_path=tmp)
            full.system.CopyFrom(sampler.sample())
            sampler.close()
            full.system.gpus.add(index=0, name="Orin", utilization_pct=61.5, memory_used_bytes=2**33)
            full.system.temperatures_c["soc0"] = 41.5
            full.system.power_w["VDD_GPU_SOC"] = 4.25
            pub.publish("telemetry", full, Priority.ROUTINE)
            dets = (Detection((1.0, 2.0, 30.5, 40.25), 0.875, 3, "person"), Detection((0, 0, 1, 1), 0.5, 0, "car"))
            agent.detections("default", Result("cam", 7, 1_700_000_000.5, "det", "2.0.0", 640, 480, 20.0, dets))
            for phase in (1, 2, 3, 4):
                agent.swap("default", phase, "det:2.0.0", "det:2.1.0", reason="gate", duration_s=1.25, rollout_id="r1")
            agent.engine_build("det:2.1.0", "orin-fp16", 0.5)
            agent.engine_build("det:2.1.0", "orin-fp16", 1.0, done=True, error="out of memory")
            agent.error("camera", "cannot open rtsp://***@cam/1")
            pub.publish_status(pb.Status.STATE_ONLINE, "connected")
            pub.publish_status(pb.Status.STATE_OFFLINE, "shutdown")
            out += [(e.topic, e.payload, e.content_type) for e in spool.read_after(0, 1000)]
        finally:
            spool.close()
    return out


def test_agent_payloads_parse_to_what_parsedict_gives(agent_payloads: list[tuple[str, bytes, str]]) -> None:
    kinds = {(t.rsplit("/", 1)[1], ct) for t, _, ct in agent_payloads}
    assert len(kinds) == 6, kinds  # status, telemetry, events in JSON and in protobuf
    for topic, payload, ctype in agent_payloads:
        kind = topic.rsplit("/", 1)[1]
        parsed = parse_message(topic, payload, ctype, 1 << 18)
        msg = KINDS[kind]()
        if ctype == "application/x-protobuf":
            msg.ParseFromString(payload)
            assert parsed.payload == payload  # stored as received
        else:
            obj = json.loads(payload)
            json_format.ParseDict(obj, msg)
            assert_agrees(kind, obj)
            assert parsed.payload == payload.decode()
        assert parsed.facts == facts_of_message(kind, msg)
        assert parsed.message == msg


# --- every odd value in every kind of field ----------------------------------------------------------
SLOTS = [  # (kind, path to the object, field name): one field of each type and shape
    ("telemetry", (), "intervalS"),  # double
    ("events", ("detections", "detections", 0, "box"), "x1"),  # float
    ("events", ("detections", "detections", 0), "score"),  # float
    ("telemetry", ("header",), "sequence"),  # uint64
    ("telemetry", ("header",), "schema"),  # uint32
    ("events", ("detections", "detections", 0), "classId"),  # int32
    ("status", (), "lastWill"),  # bool
    ("status", ("header",), "deviceId"),  # string
    ("status", (), "state"),  # enum
    ("events", ("swap",), "phase"),  # enum (the error flag reads it)
    ("status", (), "startedAt"),  # Timestamp
    ("telemetry", ("header",), "time"),  # Timestamp
    ("telemetry", ("pipelines", 0), "queueDepths"),  # map<string, uint64>
    ("telemetry", ("system",), "temperaturesC"),  # map<string, double>
    ("status", (), "labels"),  # map<string, string>
    ("telemetry", ("system",), "cpuPerCorePct"),  # repeated double
    ("telemetry", ("header",), "models"),  # repeated message
    ("telemetry", (), "pipelines"),  # repeated message (the figures read it)
    ("telemetry", ("pipelines", 0), "latency"),  # message
    ("telemetry", (), "spool"),  # message
    ("events", (), "error"),  # oneof member
    ("events", ("engineBuild",), "error"),  # string (the error flag reads it)
]


def _base(kind: str, path: tuple[Any, ...]) -> dict[str, Any]:
    header = {"deviceId": "cam-1", "fleet": "lab", "sequence": "5", "time": "2026-03-01T10:00:00.250Z"}
    if kind == "telemetry":
        pipeline = {"fps": 29.5, "errors": "3", "latency": {"p95Ms": 20.0}, "queueDepths": {}}
        return {"header": header, "pipelines": [pipeline], "system": {}}
    if kind == "status":
        return {"header": header, "state": "STATE_ONLINE", "startedAt": "2026-03-01T09:00:00Z"}
    doc: dict[str, Any] = {"header": header, "swap": None, "engineBuild": None}  # null members do not count
    if path[:1] == ("detections",):
        doc["detections"] = {"detections": [{"box": {}}]}
    return doc


def _place(doc: dict[str, Any], path: tuple[Any, ...], name: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    target: Any = doc
    for step in path:
        if isinstance(step, str) and target.get(step) is None:
            target[step] = {}
        target = target[step]
    target[name] = value
    return doc


@pytest.mark.parametrize(("kind", "path", "name"), SLOTS)
def test_every_odd_value_in_every_kind_of_field(kind: str, path: tuple[Any, ...], name: str) -> None:
    for value in ODD:
        for shaped in (value, [value], {"k": value}):
            assert_agrees(kind, _place(_base(kind, path), path, name, shaped))


def test_parsedict_crashes_are_rejections_here() -> None:
    for kind, obj, crash in (
        ("telemetry", {"intervalS": 10**400}, OverflowError),
        ("events", {"swap": {"phase": float("inf")}}, OverflowError),
        ("telemetry", {"system": {"cpuPerCorePct": [10**400]}}, OverflowError),
        ("status", {"state": "\ud800"}, SystemError),
    ):
        with pytest.raises(crash):
            json_format.ParseDict(obj, KINDS[kind]())
        assert compiled(kind, obj) is None
        body = json.dumps(_base(kind, ()) | obj).encode()
        with pytest.raises(Rejected, match="schema"):
            parse_message(f"edgefleet/v1/lab/cam-1/{kind}", body, None, 4096)


def test_a_field_named_twice_is_left_to_parsedict() -> None:
    doc = _base("status", ()) | {"agentVersion": "a", "agent_version": "b"}
    assert compiled("status", doc) is _MISSING
    body = json.dumps(doc | {"header": doc["header"] | {"device_id": "cam-1"}}).encode()
    assert parse_message("edgefleet/v1/lab/cam-1/status", body, None, 4096).facts.agent_version == "b"
    with pytest.raises(Rejected):  # both seen by ParseDict, one invalid
        parse_message("edgefleet/v1/lab/cam-1/status", json.dumps(doc | {"agentVersion": 5}).encode(), None, 4096)


# --- generated and mutated documents -----------------------------------------------------------------
_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1),
}


class _Gen:
    """Documents for a message type; ``odd`` is the chance of an ODD value in place of a fitting one."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.odd = data.draw(st.sampled_from([0, 0.02, 0.1, 0.3]))

    def draw(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.data.draw(strategy)

    def chance(self, p: float) -> bool:
        return p > 0 and self.draw(st.floats(0, 1)) < p

    def document(self, desc: Descriptor, depth: int = 0) -> Any:
        doc: dict[str, Any] = {}
        if depth > 4:
            return doc
        oneof_used: set[str] = set()
        for fd in desc.fields:
            oneof = fd.containing_oneof
            if not self.draw(st.booleans()) or (
                oneof is not None and oneof.name in oneof_used and not self.chance(0.2)
            ):
                continue
            if oneof is not None:
                oneof_used.add(oneof.name)
            key = self.draw(st.sampled_from([fd.json_name, fd.json_name, fd.name]))
            doc[key] = self.value(fd, depth)
        if self.chance(self.odd / 2):
            doc[self.draw(st.text(max_size=5))] = 1
        return doc

    def value(self, fd: FieldDescriptor, depth: int) -> Any:
        if self.chance(self.odd):
            return self.draw(st.sampled_from(ODD))
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            vfd = fd.message_type.fields_by_name["value"]
            keys = st.text(max_size=6) | st.sampled_from(["\ud800", "\ud83d\ude00", "", "k"])
            return {self.draw(keys): self.single(vfd, depth) for _ in range(self.draw(st.integers(0, 3)))}
        if fd.is_repeated:
            return [self.single(fd, depth) for _ in range(self.draw(st.integers(0, 3)))]
        return self.single(fd, depth)

    def single(self, fd: FieldDescriptor, depth: int) -> Any:
        cpp = fd.cpp_type
        if self.chance(self.odd):
            return self.draw(st.sampled_from(ODD))
        if fd.message_type is not None:
            if fd.message_type.full_name == "google.protobuf.Timestamp":
                return self.draw(st.datetimes().map(lambda d: d.isoformat(timespec="microseconds") + "Z"))
            return self.document(fd.message_type, depth + 1)
        if cpp == FieldDescriptor.CPPTYPE_ENUM:
            values = fd.enum_type.values
            return self.draw(st.sampled_from([v.name for v in values] + [v.number for v in values]))
        if cpp == FieldDescriptor.CPPTYPE_BOOL:
            return self.draw(st.booleans())
        if cpp == FieldDescriptor.CPPTYPE_STRING:
            return self.draw(st.text(max_size=8))
        if cpp in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
            finite = st.floats(allow_nan=False, allow_infinity=False, width=32)
            return self.draw(
                finite | st.integers(-1000, 1000) | finite.map(str) | st.sampled_from(["NaN", "-Infinity"])
            )
        lo, hi = _RANGES[cpp]
        return self.draw(st.integers(lo, hi) | st.integers(lo, hi).map(str))


@FUZZ
@given(data=st.data(), kind=st.sampled_from(sorted(KINDS)))
def test_generated_documents(data: st.DataObject, kind: str) -> None:
    assert_agrees(kind, _Gen(data).document(KINDS[kind].DESCRIPTOR))


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*path, i))
    return out


@FUZZ
@given(data=st.data())
def test_mutated_agent_payloads(data: st.DataObject, agent_payloads: list[tuple[str, bytes, str]]) -> None:
    topic, payload, _ = data.draw(st.sampled_from([p for p in agent_payloads if p[2] == "application/json"]))
    kind = topic.rsplit("/", 1)[1]
    doc = json.loads(payload)
    *parent_path, last = data.draw(st.sampled_from(_paths(doc)[1:]))
    parent: Any = doc
    for step in parent_path:
        parent = parent[step]
    how = data.draw(st.sampled_from(["value", "value", "delete", "rename", "unknown"]))
    if how == "value":
        parent[last] = data.draw(st.sampled_from(ODD))
    elif how == "delete":
        del parent[last]
    elif isinstance(last, str) and how == "rename":
        snake = "".join("_" + c.lower() if c.isupper() else c for c in last)
        parent[snake] = parent.pop(last)
    elif isinstance(parent, dict):
        parent[last + "X"] = 1
    assert_agrees(kind, doc)


def test_payload_bytes_as_json_loads_reads_them(tmp_path: Path) -> None:
    """UTF-16 and a UTF-8 BOM are JSON that json.loads accepts: stored as plain UTF-8 text."""
    body = {"header": {"deviceId": "cam-1", "fleet": "lab", "sequence": "1"}, "error": {"message": "é"}}
    text = json.dumps(body, ensure_ascii=False)
    for raw in (text.encode("utf-16"), b"\xef\xbb\xbf" + text.encode()):
        p = parse_message("edgefleet/v1/lab/cam-1/events", raw, None, 4096)
        assert p.payload == text and p.facts.error_event
