"""Validate one MQTT message on the ingest topics and turn it into a typed record (or a rejection).

JSON payloads are checked by a validator compiled from the protobuf descriptors (``_protojson``: the
verdicts of ``json_format.ParseDict``, ~8x cheaper) and only what storage needs is read from them
(:class:`Facts`); the protobuf message itself is built on demand (:attr:`Parsed.message`). Binary payloads
are parsed by protobuf and kept as received.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk.kit import TopicError, parse_topic

from ._protojson import FieldReader, Invalid, Unsupported, compile_message

__all__ = ["KINDS", "Facts", "Parsed", "Rejected", "facts_of_json", "facts_of_message", "parse_message"]

# The message of each kind a device publishes: the kit's TOPIC_KINDS (tests/unit/sdk/test_topics.py).
KINDS: dict[str, Any] = {"status": pb.Status, "telemetry": pb.Telemetry, "events": pb.Event}
_VALIDATORS = {kind: compile_message(cls.DESCRIPTOR) for kind, cls in KINDS.items()}
SCHEMA = 2  # the newest payload revision this controller reads (1 and 2; docs/telemetry.md)
_INT64_MAX, _INT32_MAX = 2**63 - 1, 2**31 - 1  # telemetry_messages.seq / errors_total, devices.status_connection
PROTOBUF = "application/x-protobuf"
_ERROR_SWAP_PHASES = frozenset({pb.Event.Swap.PHASE_FAILED, pb.Event.Swap.PHASE_ROLLED_BACK})
_EVENT_KINDS = tuple(f.name for f in pb.Event.DESCRIPTOR.oneofs_by_name["kind"].fields)


class Rejected(Exception):  # noqa: N818 - a verdict, not an error condition of this process
    """A message that is not valid telemetry; ``reason`` is one of topic, not_a_device, oversized,
    malformed, schema, wrong_device (the header names another device than the topic)."""

    def __init__(self, reason: str, detail: str, device: str | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.device = device  # "<fleet>/<device>" of the topic when it names one
        # (seq, prev) when the header of the topic's device was readable: the delivery chain goes past it
        self.link: tuple[int, int] | None = None


class Facts(NamedTuple):
    """What storage reads from a message: header, figures, event kind, status fields (a tuple: cheap)."""

    device_id: str
    fleet: str
    sequence: int
    time_ns: int  # agent clock
    schema: int
    models: tuple[tuple[str, str, str], ...] = ()  # (pipeline, name, version)
    fps: float = 0.0  # telemetry: sum over pipelines
    p95_ms: float = 0.0  # telemetry: worst pipeline end-to-end p95
    errors: int = 0  # telemetry: sum of the pipelines' cumulative errors
    event: str | None = None  # events: the oneof ``kind`` set
    error_event: bool = False  # events: error, failed or rolled-back swap, failed engine build
    online: bool = False  # status
    started_ns: int = 0  # status: agent process start
    connection: int = 0  # status
    reason: str = ""  # status
    agent_version: str = ""  # status
    prev: int | None = None  # the delivery chain (header.prev); None: not chained (Last Will, broker delivery)


@dataclass(frozen=True, eq=False)
class Parsed:
    """One valid message: where it came from, what storage reads (``facts``) and the payload as stored."""

    kind: str  # status | telemetry | events
    fleet: str
    device_id: str
    sequence: int
    time: float  # agent clock, seconds since the epoch
    facts: Facts
    payload: str | bytes  # as stored: the JSON text, or the binary protobuf as received
    built: Any = None  # the protobuf message when parsing produced one

    @cached_property
    def message(self) -> Any:
        """The protobuf message (pb.Status | pb.Telemetry | pb.Event), built on first use."""
        if self.built is not None:
            return self.built
        msg = KINDS[self.kind]()
        if isinstance(self.payload, bytes):
            msg.ParseFromString(self.payload)
        else:
            json_format.ParseDict(json.loads(self.payload), msg)
        return msg

    @property
    def payload_json(self) -> str:
        """The message as JSON (the payload itself when it came as JSON)."""
        if isinstance(self.payload, str):
            return self.payload
        return str(json_format.MessageToJson(self.message, indent=None))


def parse_message(
    topic: str,
    payload: bytes,
    content_type: str | None,
    max_bytes: int,
    not_devices: frozenset[str] = frozenset(),
) -> Parsed:
    """Validate size, encoding, schema and that the header names the topic's device; raise Rejected.

    ``not_devices``: names known to belong to other roles (the controller's own certificates): with the
    generated broker ACL the topic's device level is the publisher's certificate name, so telemetry
    under one of them was not published by a device."""
    try:
        # The kit's rules for ids: '..', 'MQ 1' or a 5000-character level are not devices, and an id longer
        # than the database column would fail the whole batch it is written in.
        fleet, device, kind = parse_topic(topic)
    except TopicError as exc:
        raise Rejected("topic", str(exc)) from None
    if kind not in KINDS:  # the acknowledgements, which the controllers publish
        raise Rejected("topic", f"not a telemetry topic (kind {kind!r}): {topic[:200]!r}")
    where = f"{fleet}/{device}"
    if device in not_devices:
        raise Rejected("not_a_device", f"{device!r} is the name of a non-device certificate", where)
    try:
        return _parse(fleet, device, kind, payload, content_type, max_bytes)
    except Rejected as rej:
        rej.device = where
        raise


def _parse(fleet: str, device: str, kind: str, payload: bytes, content_type: str | None, max_bytes: int) -> Parsed:
    if len(payload) > max_bytes:
        raise Rejected("oversized", f"{len(payload)} bytes > {max_bytes}")
    built: Any = None
    stored: str | bytes
    if content_type == PROTOBUF:
        built = KINDS[kind]()
        try:
            built.ParseFromString(payload)
        except (DecodeError, RuntimeError) as exc:
            raise Rejected("malformed", f"protobuf: {exc}") from None
        facts = facts_of_message(kind, built)
        stored = bytes(payload)
    else:
        try:
            # What json.loads(bytes) does; the text is what is stored (UTF-8, without a BOM).
            stored = payload.decode(json.detect_encoding(payload), "surrogatepass")
            data = json.loads(stored)
        except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nested past the stack
            raise Rejected("malformed", f"JSON: {exc}") from None
        if not isinstance(data, dict):
            raise Rejected("schema", f"expected a JSON object, got {type(data).__name__}")
        try:
            _VALIDATORS[kind](data)
            facts = facts_of_json(kind, data)
        except Invalid as exc:
            raise Rejected("schema", str(exc)[:300]) from None
        except Unsupported:
            built = _parse_dict(kind, data)
            facts = facts_of_message(kind, built)
    if facts.device_id != device or facts.fleet != fleet:
        raise Rejected("wrong_device", f"header names {facts.fleet}/{facts.device_id}, topic {fleet}/{device}")
    if facts.sequence == 0 or facts.sequence > _INT64_MAX:
        raise Rejected("schema", "header.sequence missing or past what the store holds")
    if facts.prev is not None and facts.prev >= facts.sequence:
        raise Rejected("schema", f"header.prev {facts.prev} is not below header.sequence {facts.sequence}")
    problem = None
    if facts.schema > SCHEMA:
        problem = f"schema revision {facts.schema} is newer than {SCHEMA}"
    elif kind == "events" and facts.event is None:
        problem = "event without a kind"
    elif facts.errors > _INT64_MAX or facts.connection > _INT32_MAX:
        # valid protobuf, but past the database's integer columns: it would fail every batch it is in
        problem = "error counters or connection number past what the store holds"
    if problem is not None:
        rej = Rejected("schema", problem)
        rej.link = (facts.sequence, facts.prev) if facts.prev is not None else None
        raise rej
    return Parsed(kind, fleet, device, facts.sequence, facts.time_ns / 1e9, facts, stored, built)


def _parse_dict(kind: str, data: dict[str, Any]) -> Any:
    msg = KINDS[kind]()
    try:
        json_format.ParseDict(data, msg)
    except Exception as exc:  # ParseError, and what escapes it on odd input (OverflowError, SystemError)
        raise Rejected("schema", f"{type(exc).__name__}: {exc}"[:300]) from None
    return msg


# --- facts from a message ----------------------------------------------------------------------------
def facts_of_message(kind: str, msg: Any) -> Facts:
    """:class:`Facts` of a protobuf message (binary payloads, and the ``ParseDict`` fallback)."""
    h = msg.header
    base: dict[str, Any] = {
        "device_id": h.device_id,
        "fleet": h.fleet,
        "sequence": int(h.sequence),
        "time_ns": int(h.time.ToNanoseconds()),
        "schema": int(h.schema),
        "models": tuple((m.pipeline, m.name, m.version) for m in h.models),
        "prev": int(h.prev) if h.HasField("prev") else None,
    }
    if kind == "telemetry":
        return Facts(
            **base,
            fps=sum(p.fps for p in msg.pipelines),
            p95_ms=max((p.latency.p95_ms for p in msg.pipelines), default=0.0),
            errors=sum(p.errors for p in msg.pipelines),
        )
    if kind == "events":
        event = msg.WhichOneof("kind")
        error = event == "error" or (
            (event == "swap" and msg.swap.phase in _ERROR_SWAP_PHASES)
            or (event == "engine_build" and bool(msg.engine_build.error))
        )
        return Facts(**base, event=event, error_event=error)
    return Facts(
        **base,
        online=msg.state == pb.Status.STATE_ONLINE,
        started_ns=int(msg.started_at.ToNanoseconds()),
        connection=int(msg.connection),
        reason=msg.reason,
        agent_version=msg.agent_version,
    )


# --- facts from validated JSON -----------------------------------------------------------------------
def _reader(desc: Any, name: str) -> FieldReader:
    return FieldReader(desc, name)


class _R:
    """Readers of the fields :func:`facts_of_json` needs (JSON name or proto name, converted)."""

    header = _reader(pb.Telemetry.DESCRIPTOR, "header")  # the field is 1 in all three messages
    device_id = _reader(pb.TelemetryHeader.DESCRIPTOR, "device_id")
    fleet = _reader(pb.TelemetryHeader.DESCRIPTOR, "fleet")
    sequence = _reader(pb.TelemetryHeader.DESCRIPTOR, "sequence")
    time = _reader(pb.TelemetryHeader.DESCRIPTOR, "time")
    schema = _reader(pb.TelemetryHeader.DESCRIPTOR, "schema")
    models = _reader(pb.TelemetryHeader.DESCRIPTOR, "models")
    prev = FieldReader(pb.TelemetryHeader.DESCRIPTOR, "prev", presence=True)
    m_pipeline = _reader(pb.TelemetryModel.DESCRIPTOR, "pipeline")
    m_name = _reader(pb.TelemetryModel.DESCRIPTOR, "name")
    m_version = _reader(pb.TelemetryModel.DESCRIPTOR, "version")
    pipelines = _reader(pb.Telemetry.DESCRIPTOR, "pipelines")
    p_fps = _reader(pb.Telemetry.Pipeline.DESCRIPTOR, "fps")
    p_errors = _reader(pb.Telemetry.Pipeline.DESCRIPTOR, "errors")
    p_latency = _reader(pb.Telemetry.Pipeline.DESCRIPTOR, "latency")
    p95 = _reader(pb.Telemetry.Latency.DESCRIPTOR, "p95_ms")
    events = tuple((k, _reader(pb.Event.DESCRIPTOR, k)) for k in _EVENT_KINDS)
    swap_phase = _reader(pb.Event.Swap.DESCRIPTOR, "phase")
    build_error = _reader(pb.Event.EngineBuild.DESCRIPTOR, "error")
    state = _reader(pb.Status.DESCRIPTOR, "state")
    started_at = _reader(pb.Status.DESCRIPTOR, "started_at")
    connection = _reader(pb.Status.DESCRIPTOR, "connection")
    reason = _reader(pb.Status.DESCRIPTOR, "reason")
    agent_version = _reader(pb.Status.DESCRIPTOR, "agent_version")


def facts_of_json(kind: str, data: dict[str, Any]) -> Facts:
    """:class:`Facts` of a JSON object the compiled validator accepted (same values as from the message)."""
    r = _R
    h = r.header(data)
    models = r.models(h) or ()
    base: dict[str, Any] = {
        "device_id": r.device_id(h),
        "fleet": r.fleet(h),
        "sequence": r.sequence(h),
        "time_ns": r.time(h),
        "schema": r.schema(h),
        "models": tuple((r.m_pipeline(m), r.m_name(m), r.m_version(m)) for m in models),
        "prev": r.prev(h),
    }
    if kind == "telemetry":
        pipelines = r.pipelines(data) or ()
        return Facts(
            **base,
            fps=sum(r.p_fps(p) for p in pipelines),
            p95_ms=max((r.p95(r.p_latency(p)) for p in pipelines), default=0.0),
            errors=sum(r.p_errors(p) for p in pipelines),
        )
    if kind == "events":
        event, value = next(((k, v) for k, read in r.events if (v := read(data)) is not None), (None, None))
        error = event == "error"
        if event == "swap":
            error = r.swap_phase(value) in _ERROR_SWAP_PHASES
        elif event == "engine_build":
            error = bool(r.build_error(value))
        return Facts(**base, event=event, error_event=error)
    return Facts(
        **base,
        online=r.state(data) == pb.Status.STATE_ONLINE,
        started_ns=r.started_at(data),
        connection=r.connection(data),
        reason=r.reason(data),
        agent_version=r.agent_version(data),
    )
