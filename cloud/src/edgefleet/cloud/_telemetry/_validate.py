"""Validate one MQTT message on the ingest topics and turn it into a typed record (or a rejection)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from edgefleet.proto.v1 import telemetry_pb2 as pb

__all__ = ["Parsed", "Rejected", "parse_message", "parse_topic"]

TOPIC_ROOT = ("edgefleet", "v1")
_KINDS: dict[str, Any] = {"status": pb.Status, "telemetry": pb.Telemetry, "events": pb.Event}
SCHEMA = 1
PROTOBUF = "application/x-protobuf"


class Rejected(Exception):  # noqa: N818 - a verdict, not an error condition of this process
    """A message that is not valid telemetry; ``reason`` is one of topic, oversized, malformed, schema."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Parsed:
    kind: str  # status | telemetry | events
    fleet: str
    device_id: str
    sequence: int
    time: float  # agent clock, seconds since the epoch
    message: Any  # pb.Status | pb.Telemetry | pb.Event
    payload_json: str  # canonical JSON, as stored


def parse_topic(topic: str) -> tuple[str, str, str]:
    """``edgefleet/v1/<fleet>/<device>/<kind>`` -> (fleet, device, kind)."""
    parts = topic.split("/")
    if len(parts) != 5 or tuple(parts[:2]) != TOPIC_ROOT or parts[4] not in _KINDS or not parts[2] or not parts[3]:
        raise Rejected("topic", f"not an edgefleet telemetry topic: {topic[:200]!r}")
    return parts[2], parts[3], parts[4]


def parse_message(topic: str, payload: bytes, content_type: str | None, max_bytes: int) -> Parsed:
    """Validate size, encoding, schema and that the header names the topic's device; raise Rejected."""
    fleet, device, kind = parse_topic(topic)
    if len(payload) > max_bytes:
        raise Rejected("oversized", f"{len(payload)} bytes > {max_bytes}")
    msg = _KINDS[kind]()
    if content_type == PROTOBUF:
        try:
            msg.ParseFromString(payload)
        except (DecodeError, RuntimeError) as exc:
            raise Rejected("malformed", f"protobuf: {exc}") from None
    else:
        try:
            data = json.loads(payload)
        except (UnicodeDecodeError, ValueError) as exc:
            raise Rejected("malformed", f"JSON: {exc}") from None
        if not isinstance(data, dict):
            raise Rejected("schema", f"expected a JSON object, got {type(data).__name__}")
        try:
            json_format.ParseDict(data, msg)
        except json_format.ParseError as exc:
            raise Rejected("schema", str(exc)[:300]) from None
    h = msg.header
    if h.device_id != device or h.fleet != fleet:
        raise Rejected("schema", f"header names {h.fleet}/{h.device_id}, topic {fleet}/{device}")
    if h.sequence == 0:
        raise Rejected("schema", "header.sequence missing")
    if h.schema > SCHEMA:
        raise Rejected("schema", f"schema revision {h.schema} is newer than {SCHEMA}")
    if kind == "events" and msg.WhichOneof("kind") is None:
        raise Rejected("schema", "event without a kind")
    text = str(json_format.MessageToJson(msg, indent=None)) if content_type == PROTOBUF else payload.decode()
    return Parsed(kind, fleet, device, int(h.sequence), h.time.ToNanoseconds() / 1e9, msg, text)
