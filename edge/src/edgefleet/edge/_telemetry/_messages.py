"""Topics, headers and payload encoding for the telemetry messages in ``telemetry.proto``."""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk.kit import ACK_KIND, TOPIC_KINDS, TopicError, device_topic, topic_level_problem
from edgefleet.sdk.kit import ack_topic as _ack_topic

__all__ = [
    "SCHEMA",
    "Encoding",
    "Identity",
    "ModelInUse",
    "ack_topic",
    "encode",
    "parse_ack",
    "stamp",
    "topic",
    "with_prev",
]

SCHEMA = 2  # 2: Stream.state, state_reason, state_seconds (docs/telemetry.md)


class Encoding(str, enum.Enum):
    """Payload encoding; the MQTT 5 content type names it on every message."""

    JSON = "json"
    PROTOBUF = "protobuf"

    @property
    def content_type(self) -> str:
        return "application/json" if self is Encoding.JSON else "application/x-protobuf"


@dataclass(frozen=True)
class ModelInUse:
    pipeline: str
    name: str
    version: str

    @classmethod
    def from_ref(cls, pipeline: str, ref: str) -> ModelInUse:
        """From the SDK's ``name:version`` reference."""
        name, _, version = ref.rpartition(":")
        return cls(pipeline, name or ref, version if name else "")


@dataclass(frozen=True)
class Identity:
    """Who publishes: fleet and device ids are MQTT topic levels, so they must not hold ``/ + #``."""

    fleet: str
    device_id: str
    agent_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    #: its topics by kind (status, telemetry, events, ack), built and checked once by the kit
    topics: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from ._errors import TelemetryError

        for name, value in (("fleet", self.fleet), ("device_id", self.device_id)):
            problem = topic_level_problem(value)
            if problem is not None:
                raise TelemetryError(f"{name} {value!r} {problem}")
        topics = {kind: device_topic(self.fleet, self.device_id, kind) for kind in TOPIC_KINDS}
        topics[ACK_KIND] = _ack_topic(self.fleet, self.device_id)
        object.__setattr__(self, "topics", topics)


def topic(identity: Identity, kind: str) -> str:
    """``edgefleet/v1/<fleet>/<device>/<kind>`` with kind one of status, telemetry, events (built once,
    by the kit's ``device_topic``); another kind raises ``TopicError``, a ValueError."""
    if kind not in TOPIC_KINDS:
        raise TopicError(f"unknown topic kind {kind!r}: one of {', '.join(TOPIC_KINDS)}")
    return identity.topics[kind]


def ack_topic(identity: Identity) -> str:
    """``edgefleet/v1/<fleet>/<device>/ack``: the controllers' retained acknowledgement watermark."""
    return identity.topics[ACK_KIND]


def parse_ack(payload: bytes, identity: Identity) -> tuple[int, int] | None:
    """(watermark, highest stored) of an ``Ack`` payload (protobuf's JSON mapping) for ``identity``, or None
    when it is not one (not JSON, another device, no sequence)."""
    try:
        data = json.loads(payload)
        if not isinstance(data, dict) or data.get("deviceId", data.get("device_id")) != identity.device_id:
            return None
        seq = int(data["sequence"])
        highest = int(data.get("highest", 0))
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
    return (seq, max(seq, highest)) if seq > 0 else None


_JSON_HEAD = b'{"header": {'


def with_prev(payload: bytes, content_type: str, prev: int) -> bytes:
    """The payload with ``header.prev`` set, without re-encoding the message: binary protobuf gets a second
    ``header`` field appended (the parser merges it into the first), JSON gets the member inserted at the
    start of the header object :func:`encode` writes first."""
    if content_type == Encoding.PROTOBUF.content_type:
        inner = b"\x38" + _varint(prev)  # field 7 (prev), varint
        return payload + b"\x0a" + _varint(len(inner)) + inner  # field 1 (header), length-delimited
    if payload.startswith(_JSON_HEAD):
        return b'%s"prev": "%d", %s' % (_JSON_HEAD, prev, payload[len(_JSON_HEAD) :])
    data = json.loads(payload)  # not written by encode(): the slow way
    data.setdefault("header", {})["prev"] = str(prev)
    return json.dumps(data, ensure_ascii=False).encode()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def stamp(
    message: Any, identity: Identity, sequence: int, models: Iterable[ModelInUse], now: float | None = None
) -> None:
    """Fill ``message.header`` (every telemetry message has one)."""
    header: pb.TelemetryHeader = message.header
    header.device_id = identity.device_id
    header.fleet = identity.fleet
    header.sequence = sequence
    header.schema = SCHEMA
    header.ClearField("prev")  # set at send time (with_prev): it depends on what the spool holds then
    header.time.FromNanoseconds(int((time.time() if now is None else now) * 1e9))
    del header.models[:]
    for m in models:
        header.models.add(pipeline=m.pipeline, name=m.name, version=m.version)


def encode(message: Message, encoding: Encoding) -> bytes:
    """The payload bytes: protobuf's canonical JSON mapping (compact) or the binary encoding."""
    if encoding is Encoding.PROTOBUF:
        return bytes(message.SerializeToString())
    return str(json_format.MessageToJson(message, indent=None, ensure_ascii=False)).encode()
