"""A small MQTT 5 broker for demos and tests on machines without Mosquitto (``make demo``).

Run it as ``python -m edgefleet_devbroker --port 1883``: a dev-only distribution (``tools/devbroker``),
installed into the development venv by the Makefile and shipped by no runtime distribution. It implements
what the agent's publisher, the controller's ingest and ``edgefleet telemetry tail`` use, to the MQTT 5.0
specification: QoS 0 and 1 (it announces Maximum QoS 1), PUBACK "no matching subscribers" (0x10), retained
messages, Last Will (sent when a client vanishes, times out or disconnects with reason 0x04), persistent
sessions (``clean_start`` off plus a session expiry: subscriptions kept and QoS 1 messages queued while
the client is away, unacknowledged ones re-sent with DUP on its return), the client's Receive Maximum,
``+``/``#`` wildcards (``$`` topics not matched by a leading wildcard), shared subscriptions
(``$share/<group>/<filter>``: round robin over the connected members, queued to a member when none is
connected), No Local, Retain As Published and Retain Handling, session takeover, keepalive, message
properties passed through (content type, user properties...). MQTT 3.1.1 clients are refused with a
3.1.1 CONNACK.

It is **not** a production broker: no TLS, no authentication or ACLs (username and password are ignored),
sessions live in memory (``--persist FILE`` saves them, with what is queued, on SIGTERM and loads them at
start, as Mosquitto's persistence does: on SIGTERM it stops listening, ends every connection with DISCONNECT
"server shutting down" and no Last Will, and only then saves, so every message a publisher got a PUBACK for
is in the file), no QoS 2, no topic aliases. Use Mosquitto (docs/operations.md) for a fleet.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import itertools
import json
import logging
import os
import signal
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["EmbeddedBroker", "main", "topic_matches"]

_log = logging.getLogger(__name__)

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = 8, 9, 10, 11, 12, 13, 14, 15

MAX_PACKET = 4 * 1024 * 1024
MAX_QUEUED = 200_000  # QoS 1 messages kept per session while its client is away; the oldest go first
# Bytes a connected subscriber may leave unread in the broker before its QoS 0 messages are dropped (the
# specification lets a server drop QoS 0 messages); without it a subscriber that stops reading grows the
# broker's memory without limit. QoS 1 is bounded by Receive Maximum and MAX_QUEUED instead.
MAX_UNREAD_BYTES = 8 << 20

# Property identifier -> wire type (MQTT 5.0, 2.2.2.2)
_BYTE, _U16, _U32, _VARINT, _STR, _BIN, _PAIR = range(7)
_PROPS = {
    0x01: _BYTE, 0x02: _U32, 0x03: _STR, 0x08: _STR, 0x09: _BIN, 0x0B: _VARINT, 0x11: _U32, 0x12: _STR,
    0x13: _U16, 0x15: _STR, 0x16: _BIN, 0x17: _BYTE, 0x18: _U32, 0x19: _BYTE, 0x1A: _STR, 0x1C: _STR,
    0x1F: _STR, 0x21: _U16, 0x22: _U16, 0x23: _U16, 0x24: _BYTE, 0x25: _BYTE, 0x26: _PAIR, 0x27: _U32,
    0x28: _BYTE, 0x29: _BYTE, 0x2A: _BYTE,
}  # fmt: skip
_NOT_FORWARDED = {0x0B, 0x23}  # subscription identifier, topic alias: per connection, never passed on


class ProtocolError(Exception):
    def __init__(self, reason: int, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


# --- wire format ---------------------------------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("!H", len(raw)) + raw


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ProtocolError(0x81, "packet shorter than its fields")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int(struct.unpack("!H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack("!I", self.take(4))[0])

    def varint(self) -> int:
        value, shift = 0, 0
        for _ in range(4):
            byte = self.u8()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ProtocolError(0x81, "variable byte integer longer than 4 bytes")

    def binary(self) -> bytes:
        return self.take(self.u16())

    def string(self) -> str:
        try:
            return self.binary().decode()
        except UnicodeDecodeError:
            raise ProtocolError(0x81, "string is not UTF-8") from None

    def rest(self) -> bytes:
        chunk, self.pos = self.data[self.pos :], len(self.data)
        return chunk

    def done(self) -> bool:
        return self.pos >= len(self.data)

    def properties(self) -> list[tuple[int, bytes]]:
        """(identifier, encoded value) pairs, in order."""
        length = self.varint()
        end = self.pos + length
        if end > len(self.data):
            raise ProtocolError(0x81, "properties longer than the packet")
        props = []
        while self.pos < end:
            pid = self.varint()
            kind = _PROPS.get(pid)
            start = self.pos
            if kind is None:
                raise ProtocolError(0x81, f"unknown property 0x{pid:02x}")
            if kind == _BYTE:
                self.take(1)
            elif kind == _U16:
                self.take(2)
            elif kind == _U32:
                self.take(4)
            elif kind == _VARINT:
                self.varint()
            elif kind in (_STR, _BIN):
                self.binary()
            else:
                self.binary()
                self.binary()
            props.append((pid, self.data[start : self.pos]))
        if self.pos != end:
            raise ProtocolError(0x81, "malformed properties")
        return props


def _prop_int(props: list[tuple[int, bytes]], pid: int, default: int) -> int:
    for p, raw in props:
        if p == pid:
            return int.from_bytes(raw, "big")
    return default


def _encode_props(props: list[tuple[int, bytes]]) -> bytes:
    body = b"".join(_varint(pid) + raw for pid, raw in props)
    return _varint(len(body)) + body


def _packet(kind: int, flags: int, body: bytes) -> bytes:
    return bytes([(kind << 4) | flags]) + _varint(len(body)) + body


def topic_matches(filt: str, topic: str) -> bool:
    """MQTT topic filter matching (``+`` one level, ``#`` the rest; ``$`` topics need a literal first level)."""
    if topic.startswith("$") and filt[:1] in ("+", "#"):
        return False
    f_parts, t_parts = filt.split("/"), topic.split("/")
    for i, f in enumerate(f_parts):
        if f == "#":
            return True
        if i >= len(t_parts) or (f != "+" and f != t_parts[i]):
            return False
    return len(f_parts) == len(t_parts)


def _split_share(filt: str) -> tuple[str | None, str]:
    """``$share/<group>/<filter>`` -> (group, filter); any other filter -> (None, filter)."""
    if not filt.startswith("$share/"):
        return None, filt
    _, group, plain = [*filt.split("/", 2), "", ""][:3]
    return group, plain


def _valid_filter(filt: str) -> bool:
    if not filt or "\x00" in filt:
        return False
    parts = filt.split("/")
    for i, p in enumerate(parts):
        if ("#" in p and (p != "#" or i != len(parts) - 1)) or ("+" in p and p != "+"):
            return False
    return True


# --- state ---------------------------------------------------------------------------------------------
@dataclass
class _Message:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    props: list[tuple[int, bytes]]
    origin: str  # publishing client id (No Local)


@dataclass
class _Sub:
    qos: int
    no_local: bool
    retain_as_published: bool


@dataclass
class _Session:
    client_id: str
    subs: dict[str, _Sub] = field(default_factory=dict)  # plain filters
    shared: dict[tuple[str, str], _Sub] = field(default_factory=dict)  # (group, filter)
    pending: collections.deque[tuple[_Message, int, bool]] = field(default_factory=collections.deque)
    inflight: dict[int, tuple[_Message, int, bool]] = field(default_factory=dict)
    next_id: int = 1
    expiry_s: int = 0
    gone_at: float | None = None  # when the client went away (None: connected)
    conn: _Connection | None = None
    dropped: int = 0

    def packet_id(self) -> int:
        for _ in range(65535):
            pid, self.next_id = self.next_id, self.next_id % 65535 + 1
            if pid not in self.inflight:
                return pid
        raise ProtocolError(0x93, "no free packet identifier")


class _Connection:
    def __init__(self, broker: EmbeddedBroker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker, self.reader, self.writer = broker, reader, writer
        self.session: _Session | None = None
        self.will: _Message | None = None
        self.receive_max = 65535
        self.keepalive = 0
        self.closed = False

    def send(self, data: bytes) -> None:
        if not self.closed:
            self.writer.write(data)

    def unread(self) -> int:
        """Bytes written to this client that it has not taken yet (asyncio's write buffer)."""
        try:
            return int(self.writer.transport.get_write_buffer_size())
        except (AttributeError, RuntimeError):
            return 0

    def close(self, reason: int | None = None) -> None:
        if self.closed:
            return
        if reason is not None:
            with contextlib.suppress(Exception):
                self.writer.write(_packet(DISCONNECT, 0, bytes([reason]) + b"\x00"))
        self.closed = True
        with contextlib.suppress(Exception):
            self.writer.close()


class EmbeddedBroker:
    """The broker; :meth:`serve` runs it on the current event loop until cancelled."""

    def __init__(self) -> None:
        self.sessions: dict[str, _Session] = {}
        self.retained: dict[str, _Message] = {}
        self._rr = itertools.count()
        self._anon = itertools.count(1)
        self._server: asyncio.Server | None = None
        self._handlers: dict[asyncio.Task[Any], _Connection] = {}  # connections being served
        self._closing = False

    # --- persistence (like Mosquitto's: written on a clean shutdown, read at start) ---------------------
    def save(self, path: Path) -> None:
        """Write sessions (subscriptions, queued and unacknowledged QoS 1 messages) and retained messages."""

        def msg(m: _Message, qos: int, retain: bool) -> dict[str, Any]:
            props = [[pid, base64.b64encode(raw).decode()] for pid, raw in m.props]
            return {"topic": m.topic, "payload": base64.b64encode(m.payload).decode(), "qos": qos, "retain": retain,
                    "props": props, "origin": m.origin}  # fmt: skip

        now = time.monotonic()
        doc = {
            "retained": [msg(m, m.qos, True) for m in self.retained.values()],
            "sessions": [
                {
                    "client_id": s.client_id,
                    "expiry_s": s.expiry_s,
                    "away_s": now - s.gone_at if s.gone_at is not None else 0.0,
                    "subs": [[f, sub.qos, sub.no_local, sub.retain_as_published] for f, sub in s.subs.items()],
                    "shared": [[g, f, sub.qos] for (g, f), sub in s.shared.items()],
                    # in-flight first, in the order sent (packet ids wrap, so not sorted by id)
                    "messages": [msg(*e) for e in s.inflight.values()] + [msg(*e) for e in s.pending],
                }
                for s in self.sessions.values()
                if s.expiry_s > 0
            ],
        }
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(tmp, path)

    def load(self, path: Path) -> None:
        if not path.exists():
            return
        doc = json.loads(path.read_text(encoding="utf-8"))

        def msg(d: dict[str, Any]) -> tuple[_Message, int, bool]:
            props = [(int(pid), base64.b64decode(raw)) for pid, raw in d["props"]]
            m = _Message(
                d["topic"], base64.b64decode(d["payload"]), int(d["qos"]), bool(d["retain"]), props, d["origin"]
            )
            return m, int(d["qos"]), bool(d["retain"])

        for d in doc.get("retained", []):
            m, _, _ = msg(d)
            self.retained[m.topic] = m
        now = time.monotonic()
        for d in doc.get("sessions", []):
            s = _Session(d["client_id"], expiry_s=int(d["expiry_s"]), gone_at=now - float(d["away_s"]))
            s.subs = {f: _Sub(int(q), bool(nl), bool(rap)) for f, q, nl, rap in d["subs"]}
            s.shared = {(g, f): _Sub(int(q), False, False) for g, f, q in d["shared"]}
            s.pending.extend(msg(m) for m in d["messages"])
            self.sessions[s.client_id] = s

    async def serve(self, host: str, port: int, ready: asyncio.Future[int] | None = None) -> None:
        server = await asyncio.start_server(self._client, host, port)
        self._server = server
        bound = server.sockets[0].getsockname()[1]
        if ready is not None:
            ready.set_result(bound)
        sweeper = asyncio.create_task(self._expire_sessions())
        try:
            async with server:
                await server.serve_forever()
        finally:
            sweeper.cancel()

    async def shutdown(self) -> None:
        """Stop listening and end every connection (DISCONNECT 0x8B "server shutting down", no Last Will),
        waiting for each connection's handler to finish. Once this returns nothing more is routed or
        acknowledged, so :meth:`save` holds every message a publisher received a PUBACK for."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        while self._handlers:
            # Closing the connection stops a handler whose cancellation asyncio.wait_for swallowed (Python
            # < 3.12 does when the read it waits on completes at the same moment).
            for task, conn in list(self._handlers.items()):
                conn.close(0x8B)
                task.cancel()
            await asyncio.wait(list(self._handlers), timeout=1.0)

    def expire(self, now: float | None = None) -> list[str]:
        """Forget the sessions whose client has been away longer than their expiry interval."""
        t = time.monotonic() if now is None else now
        gone = [
            cid
            for cid, s in self.sessions.items()
            if s.conn is None and s.gone_at is not None and t - s.gone_at > s.expiry_s
        ]
        for cid in gone:
            del self.sessions[cid]
        return gone

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(5.0)
            self.expire()

    # --- one connection -------------------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(self, reader, writer)
        if self._closing:  # accepted just before shutdown closed the listener
            conn.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._handlers[task] = conn
        send_will = True
        try:
            kind, flags, body = await asyncio.wait_for(self._read(reader), 10.0)
            if kind != CONNECT:
                raise ProtocolError(0x82, "first packet is not CONNECT")
            if not self._connect(conn, body):
                return
            while not conn.closed:
                timeout = conn.keepalive * 1.5 if conn.keepalive else None
                try:
                    kind, flags, body = await asyncio.wait_for(self._read(reader), timeout)
                except asyncio.TimeoutError:
                    raise ProtocolError(0x8D, "keepalive timeout") from None
                if kind == DISCONNECT:
                    send_will = self._disconnect(conn, body)
                    break
                self._handle(conn, kind, flags, body)
                await writer.drain()
        except ProtocolError as exc:
            _log.info("client %s: %s", conn.session.client_id if conn.session else "?", exc)
            conn.close(exc.reason)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
            pass
        except asyncio.CancelledError:
            if not self._closing:
                raise
        finally:
            conn.close()
            # shutting down: the session stays (saved with --persist) and the will is not sent
            self._gone(conn, send_will and not self._closing)
            self._handlers.pop(task, None)

    async def _read(self, reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
        first = (await reader.readexactly(1))[0]
        length, shift = 0, 0
        for _ in range(4):
            byte = (await reader.readexactly(1))[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        else:
            raise ProtocolError(0x81, "remaining length longer than 4 bytes")
        if length > MAX_PACKET:
            raise ProtocolError(0x95, f"packet of {length} bytes is too large")
        return first >> 4, first & 0x0F, await reader.readexactly(length)

    def _connect(self, conn: _Connection, body: bytes) -> bool:
        r = _Reader(body)
        name = r.string()
        if name not in ("MQTT", "MQIsdp"):  # MQIsdp: MQTT 3.1
            raise ProtocolError(0x81, "not MQTT")
        level = r.u8()
        if (
            name != "MQTT" or level != 5
        ):  # answered in the client's own version: 3.1.1 CONNACK, "unacceptable protocol version"
            conn.send(_packet(CONNACK, 0, b"\x00\x01"))
            conn.close()
            return False
        flags = r.u8()
        conn.keepalive = r.u16()
        props = r.properties()
        client_id = r.string()
        will: _Message | None = None
        if flags & 0x04:
            will_props = [(p, raw) for p, raw in r.properties() if p != 0x18]
            will_topic = r.string()
            if not will_topic or "+" in will_topic or "#" in will_topic:
                raise ProtocolError(0x90, "invalid will topic")
            will = _Message(will_topic, r.binary(), min(1, (flags >> 3) & 0x03), bool(flags & 0x20), will_props, "")
        if flags & 0x80:
            r.string()  # user name: accepted, not checked (no authentication here)
        if flags & 0x40:
            r.binary()
        assigned = None
        if not client_id:
            client_id = assigned = f"embedded-{next(self._anon)}"
        conn.receive_max = _prop_int(props, 0x21, 65535) or 65535
        old = self.sessions.get(client_id)
        if old is not None and old.conn is not None:  # session takeover
            previous = old.conn
            previous.close(0x8E)
            self._gone(previous, True)
        now = time.monotonic()
        clean = bool(flags & 0x02)
        if old is not None and (clean or (old.gone_at is not None and now - old.gone_at > old.expiry_s)):
            old = None
        session = old or _Session(client_id)
        self.sessions[client_id] = session
        session.expiry_s = _prop_int(props, 0x11, 0)
        session.conn, session.gone_at = conn, None
        conn.session, conn.will = session, will
        ack_props = [(0x24, b"\x01"), (0x25, b"\x01"), (0x2A, b"\x01"), (0x28, b"\x01"), (0x29, b"\x00")]
        if assigned:
            ack_props.append((0x12, _string(assigned)))
        conn.send(_packet(CONNACK, 0, bytes([1 if old is not None else 0, 0]) + _encode_props(ack_props)))
        for pid, (msg, qos, retain) in list(session.inflight.items()):  # in the order first sent
            conn.send(self._publish_packet(msg, qos, retain, pid, dup=True))
        self._pump(session)
        return True

    def _disconnect(self, conn: _Connection, body: bytes) -> bool:
        """A DISCONNECT: True when the Last Will must still be sent (reason 0x04)."""
        reason = body[0] if body else 0
        if len(body) > 1 and conn.session is not None:
            expiry = _prop_int(_Reader(body[1:]).properties(), 0x11, -1)
            if expiry >= 0:
                conn.session.expiry_s = expiry
        return reason == 0x04

    def _gone(self, conn: _Connection, send_will: bool) -> None:
        session = conn.session
        if session is None or session.conn is not conn:
            return
        session.conn, session.gone_at = None, time.monotonic()
        if session.expiry_s == 0:
            del self.sessions[session.client_id]
        if send_will and conn.will is not None:
            self._route(conn.will)
        conn.will = None

    # --- packets --------------------------------------------------------------------------------------
    def _handle(self, conn: _Connection, kind: int, flags: int, body: bytes) -> None:
        session = conn.session
        assert session is not None
        if kind == PUBLISH:
            self._on_publish(conn, flags, body)
        elif kind == PUBACK:
            if len(body) < 2:
                raise ProtocolError(0x81, "short PUBACK")
            session.inflight.pop(struct.unpack("!H", body[:2])[0], None)
            self._pump(session)
        elif kind == SUBSCRIBE:
            self._on_subscribe(conn, flags, body)
        elif kind == UNSUBSCRIBE:
            self._on_unsubscribe(conn, flags, body)
        elif kind == PINGREQ:
            conn.send(_packet(PINGRESP, 0, b""))
        elif kind in (PUBREC, PUBREL, PUBCOMP):
            raise ProtocolError(0x9B, "QoS 2 is not supported (Maximum QoS 1)")
        else:
            raise ProtocolError(0x82, f"unexpected packet type {kind}")

    def _on_publish(self, conn: _Connection, flags: int, body: bytes) -> None:
        qos, retain = (flags >> 1) & 0x03, bool(flags & 0x01)
        if qos > 1:
            raise ProtocolError(0x9B, "QoS 2 is not supported (Maximum QoS 1)")
        r = _Reader(body)
        topic = r.string()
        if not topic or "+" in topic or "#" in topic:
            raise ProtocolError(0x90, f"invalid topic name {topic[:80]!r}")
        pid = r.u16() if qos else 0
        props = r.properties()
        if any(p == 0x23 for p, _ in props):
            raise ProtocolError(0x94, "topic aliases are not supported (Topic Alias Maximum 0)")
        assert conn.session is not None
        msg = _Message(topic, r.rest(), qos, retain, [(p, v) for p, v in props if p not in _NOT_FORWARDED], "")
        msg.origin = conn.session.client_id
        matched = self._route(msg)
        if qos:
            # 0x10 "no matching subscribers": accepted, but nobody has it (the agent keeps it and retries)
            reason = b"" if matched else b"\x10"
            conn.send(_packet(PUBACK, 0, struct.pack("!H", pid) + reason))

    @staticmethod
    def _subscription_request(conn: _Connection, kind: str, flags: int, body: bytes) -> tuple[_Session, _Reader, int]:
        """(SUBSCRIBE/UNSUBSCRIBE) the session, a reader positioned at the first filter, the packet id."""
        if flags != 0x02:
            raise ProtocolError(0x81, f"{kind} flags must be 0010")
        assert conn.session is not None
        r = _Reader(body)
        pid = r.u16()
        r.properties()
        return conn.session, r, pid

    def _on_subscribe(self, conn: _Connection, flags: int, body: bytes) -> None:
        session, r, pid = self._subscription_request(conn, "SUBSCRIBE", flags, body)
        codes = []
        retained: list[tuple[_Message, int]] = []
        while not r.done():
            group, filt = _split_share(r.string())
            opts = r.u8()
            qos = min(1, opts & 0x03)
            sub = _Sub(qos, bool(opts & 0x04), bool(opts & 0x08))
            handling = (opts >> 4) & 0x03
            if group is not None and (not group or "+" in group or "#" in group):
                codes.append(0x8F)
                continue
            if not _valid_filter(filt):
                codes.append(0x8F)
                continue
            if group is not None:
                session.shared[(group, filt)] = sub  # shared subscriptions get no retained messages
            else:
                new = filt not in session.subs
                session.subs[filt] = sub
                if handling == 0 or (handling == 1 and new):
                    retained += [(m, qos) for t, m in self.retained.items() if topic_matches(filt, t)]
            codes.append(qos)
        conn.send(_packet(SUBACK, 0, struct.pack("!H", pid) + b"\x00" + bytes(codes)))
        for msg, qos in retained:
            self._deliver(session, msg, min(qos, msg.qos), True)

    def _on_unsubscribe(self, conn: _Connection, flags: int, body: bytes) -> None:
        session, r, pid = self._subscription_request(conn, "UNSUBSCRIBE", flags, body)
        codes = []
        while not r.done():
            group, filt = _split_share(r.string())
            if group is not None:
                found = session.shared.pop((group, filt), None) is not None
            else:
                found = session.subs.pop(filt, None) is not None
            codes.append(0x00 if found else 0x11)
        conn.send(_packet(UNSUBACK, 0, struct.pack("!H", pid) + b"\x00" + bytes(codes)))

    # --- routing --------------------------------------------------------------------------------------
    def _route(self, msg: _Message) -> int:
        """Deliver or queue ``msg`` for every matching session; returns how many it went to."""
        if msg.retain:
            if msg.payload:
                self.retained[msg.topic] = msg
            else:
                self.retained.pop(msg.topic, None)
        groups: dict[tuple[str, str], list[tuple[_Session, _Sub]]] = {}
        matched = 0
        for session in list(self.sessions.values()):
            best: _Sub | None = None
            for filt, sub in session.subs.items():
                if topic_matches(filt, msg.topic) and not (sub.no_local and session.client_id == msg.origin):
                    best = sub if best is None or sub.qos > best.qos else best
            if best is not None:
                matched += 1
                self._deliver(session, msg, min(best.qos, msg.qos), msg.retain and best.retain_as_published)
            for (group, filt), sub in session.shared.items():
                if topic_matches(filt, msg.topic):
                    groups.setdefault((group, filt), []).append((session, sub))
        for members in groups.values():
            online = [m for m in members if m[0].conn is not None] or members
            session, sub = online[next(self._rr) % len(online)]
            matched += 1
            self._deliver(session, msg, min(sub.qos, msg.qos), False)
        return matched

    def _deliver(self, session: _Session, msg: _Message, qos: int, retain: bool) -> None:
        if qos == 0:
            conn = session.conn
            if conn is None:
                return
            if conn.unread() > MAX_UNREAD_BYTES:
                self._dropped(session, "it is not reading: QoS 0")
                return
            conn.send(self._publish_packet(msg, 0, retain, 0, dup=False))
            return
        if len(session.pending) >= MAX_QUEUED:
            session.pending.popleft()
            self._dropped(session, "queue full")
        session.pending.append((msg, qos, retain))
        self._pump(session)

    @staticmethod
    def _dropped(session: _Session, why: str) -> None:
        session.dropped += 1
        if session.dropped in (1, 1000) or session.dropped % 100_000 == 0:
            _log.warning("session %s: %s, %d messages dropped", session.client_id, why, session.dropped)

    def _pump(self, session: _Session) -> None:
        conn = session.conn
        if conn is None:
            return
        while session.pending and len(session.inflight) < conn.receive_max:
            msg, qos, retain = session.pending.popleft()
            pid = session.packet_id()
            session.inflight[pid] = (msg, qos, retain)
            conn.send(self._publish_packet(msg, qos, retain, pid, dup=False))

    @staticmethod
    def _publish_packet(msg: _Message, qos: int, retain: bool, pid: int, *, dup: bool) -> bytes:
        flags = (0x08 if dup else 0) | (qos << 1) | (1 if retain else 0)
        head = _string(msg.topic) + (struct.pack("!H", pid) if qos else b"")
        return _packet(PUBLISH, flags, head + _encode_props(msg.props) + msg.payload)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="edgefleet's embedded MQTT 5 broker (demos and tests only)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=1883)
    ap.add_argument("--persist", type=Path, help="save sessions and retained messages here on SIGTERM, load at start")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    broker = EmbeddedBroker()
    if args.persist is not None:
        try:
            broker.load(args.persist)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"edgefleet embedded broker: {args.persist} is not readable state ({exc}); starting empty",
                  file=sys.stderr)  # fmt: skip

    async def run() -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[int] = loop.create_future()
        task = asyncio.create_task(broker.serve(args.host, args.port, ready))
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        port = await ready
        print(f"edgefleet embedded MQTT 5 broker listening on {args.host}:{port}", flush=True)
        waiter = asyncio.create_task(stopping.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # a failure to listen
        # Connections end before the state is written: a connection still being served after the save
        # could acknowledge a message the file does not hold, and a restart would lose it.
        await broker.shutdown()
        task.cancel()
        await asyncio.wait([task], timeout=5.0)
        if args.persist is not None:
            broker.save(args.persist)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"edgefleet embedded broker: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
