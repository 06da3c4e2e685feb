"""The MQTT 5 publisher: drains the disk spool to the broker, in order, deleting an entry only once it is
delivered: once a controller's acknowledgement watermark covers it (``Delivery.CONTROLLER``, the default;
``_delivery``), or on the broker's PUBACK (``Delivery.BROKER``).

One thread owns the connection and runs an explicit state machine::

    STOPPED ─start─▶ CONNECTING ─CONNACK─▶ CONNECTED ─lost─▶ BACKOFF ─jittered delay─▶ CONNECTING
                          │ refused/timeout                                   ▲
                          └───────────────────────────────────────────────────┘

Each connection uses a fresh paho client (clean start, no broker session on the agent side), so the
spool is the only copy of anything not yet acknowledged: after a reconnect, sending restarts at the
oldest spooled entry (the retained watermark, which arrives on subscribing, trims what was stored in the
meantime). Copies are deduplicated by the controller on (device, sequence). Each connection sets its own
Last Will: a retained OFFLINE ``Status`` for that connection number.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from edgefleet.proto.v1 import telemetry_pb2 as pb

from ._delivery import AckTracker, Delivery
from ._messages import Encoding, Identity, ModelInUse, ack_topic, encode, parse_ack, stamp, topic, with_prev
from ._mqtt_connection import BrokerAddress
from ._spool import Priority, Spool, SpoolEntry, SpoolStats

__all__ = ["ConnectionState", "Delivery", "MqttPublisher", "PublisherStats"]

_log = logging.getLogger(__name__)

_NO_SUBSCRIBERS = 0x10  # MQTT 5 PUBACK reason code


class ConnectionState(str, enum.Enum):
    STOPPED = "stopped"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"


@dataclass(frozen=True)
class PublisherStats:
    state: ConnectionState
    connections: int
    connect_failures: int
    sent: int
    acked: int
    rejected: int
    held: int  # PUBACKs "no matching subscribers": kept in the spool and sent again
    inflight: int
    spool: SpoolStats
    delivery: Delivery = Delivery.CONTROLLER
    watermarks: int = 0  # acknowledgements received from controllers
    outstanding: int = 0  # sent on this connection, not yet covered by a watermark
    resends: int = 0  # passes that went back to the oldest entry because no acknowledgement came


class _Session:
    """Callbacks of one paho client; the sender thread consumes what they record."""

    def __init__(self, wake: threading.Event, identity: Identity) -> None:
        self.connected = threading.Event()
        self.closed = threading.Event()
        self.refused: str | None = None
        self.acks: deque[tuple[int, int, str]] = deque()
        self.watermarks: deque[tuple[int, int]] = deque(maxlen=1000)  # (watermark, highest stored)
        self._identity = identity
        self._wake = wake

    def on_connect(self, _c: mqtt.Client, _u: Any, _f: Any, reason: ReasonCode, _p: Any) -> None:
        if reason.is_failure:
            self.refused = str(reason)
            self.closed.set()
        else:
            self.connected.set()
        self._wake.set()

    def on_disconnect(self, _c: mqtt.Client, _u: Any, _f: Any, reason: ReasonCode, _p: Any) -> None:
        self.closed.set()
        self._wake.set()

    def on_publish(self, _c: mqtt.Client, _u: Any, mid: int, reason: ReasonCode, _p: Any) -> None:
        self.acks.append((mid, int(reason.value), str(reason)))
        self._wake.set()

    def on_message(self, _c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        ack = parse_ack(bytes(msg.payload), self._identity)
        if ack is None:
            _log.debug("not an acknowledgement on %s", msg.topic)
            return
        self.watermarks.append(ack)
        self._wake.set()


class MqttPublisher:
    """Publishes ``Status``/``Telemetry``/``Event`` messages for one device through a disk spool.

    Example::

        spool = Spool("/var/lib/edgefleet/telemetry.db")
        pub = MqttPublisher(parse_broker_url("mqtt://127.0.0.1:1883"), Identity("lab", "cam-1"), spool)
        pub.start()
        pub.publish("telemetry", pb.Telemetry(interval_s=10), Priority.ROUTINE)
        pub.stop()
    """

    def __init__(
        self,
        broker: BrokerAddress,
        identity: Identity,
        spool: Spool,
        *,
        encoding: Encoding = Encoding.JSON,
        keepalive_s: int = 30,
        connect_timeout_s: float = 5.0,
        window: int = 64,
        backoff_s: tuple[float, float] = (0.2, 15.0),
        hold_s: float = 1.0,
        models: Callable[[], Iterable[ModelInUse]] | None = None,
        delivery: Delivery | str = Delivery.CONTROLLER,
        ack_timeout_s: float = 10.0,
    ) -> None:
        """``delivery``: what deletes a spooled message (``_delivery``); ``ack_timeout_s``: how long a sent
        message may wait for a controller's acknowledgement before it is sent again."""
        self.broker = broker
        self.identity = identity
        self.spool = spool
        self.encoding = encoding
        self._keepalive = keepalive_s
        self._connect_timeout = connect_timeout_s
        self._window = max(1, window)
        self._backoff = backoff_s
        self._hold_s = hold_s
        self._held = 0
        self._models_fn = models
        self.delivery = Delivery(delivery)
        self._tracker = AckTracker(ack_timeout_s, window)
        self._watermarks = 0
        self._resends = 0
        self._no_ack_warned = False
        self._progress_at = time.monotonic()
        self._highest = 0  # the highest sequence a controller said it stored
        self._stuck: tuple[int, int] = (0, 0)  # (entry id, passes) of the oldest entry sent again and again
        self._client_id = f"edgefleet-{identity.fleet}-{identity.device_id}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._draining = threading.Event()
        self._thread: threading.Thread | None = None
        self._state_lock = threading.Lock()
        self._status_lock = threading.Lock()  # orders ONLINE (connect) against OFFLINE (stop)
        self._state = ConnectionState.STOPPED
        self._connection = 0
        self._connections = 0
        self._connect_failures = 0
        self._sent = 0
        self._acked = 0
        self._rejected = 0
        self._inflight = 0
        self._started_at = time.time()
        self._props: dict[str, Properties] = {}
        spool.add_listener(self._wake.set)

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._started_at = time.time()
        self._stop.clear()
        self._draining.clear()
        self._thread = threading.Thread(target=self._run, name="edgefleet-telemetry-mqtt", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Publish a retained OFFLINE status, wait up to ``timeout_s`` for the spool to drain, disconnect.

        Returns whether everything spooled was acknowledged. What is left stays in the spool for the next
        start; when the OFFLINE status could not be delivered, the broker publishes the Last Will.
        """
        if self._thread is None:
            return len(self.spool) == 0
        with self._status_lock:
            self._draining.set()
            self.publish_status(pb.Status.STATE_OFFLINE, "shutdown")
        drained = self.flush(timeout_s)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=self._connect_timeout + 2.0)
        if self._thread.is_alive():
            _log.warning("telemetry publisher thread did not stop in time")
        self._thread = None
        self._set_state(ConnectionState.STOPPED)
        return drained

    def flush(self, timeout_s: float) -> bool:
        """Wait until the spool is empty (everything acknowledged) or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        while len(self.spool) > 0:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    # --- publishing --------------------------------------------------------------------------------
    def publish(self, kind: str, message: Any, priority: Priority) -> int:
        """Stamp ``message.header`` with the next sequence number and spool it; returns the sequence."""
        models = self._models()
        retain = kind == "status"

        def build(seq: int) -> bytes:
            stamp(message, self.identity, seq, models)
            return encode(message, self.encoding)

        return self.spool.append(
            priority,
            topic(self.identity, kind),
            build,
            qos=1,
            retain=retain,
            content_type=self.encoding.content_type,
        )

    def publish_status(self, state: int, reason: str) -> int:
        return self.publish("status", self._status(state, reason, last_will=False), Priority.CRITICAL)

    @property
    def state(self) -> ConnectionState:
        with self._state_lock:
            return self._state

    def stats(self) -> PublisherStats:
        with self._state_lock:
            return PublisherStats(
                self._state,
                self._connections,
                self._connect_failures,
                self._sent,
                self._acked,
                self._rejected,
                self._held,
                self._inflight,
                self.spool.stats(),
                self.delivery,
                self._watermarks,
                self._tracker.outstanding,
                self._resends,
            )

    # --- internals ---------------------------------------------------------------------------------
    def _models(self) -> list[ModelInUse]:
        if self._models_fn is None:
            return []
        try:
            return list(self._models_fn())
        except Exception:
            _log.debug("model list unavailable", exc_info=True)
            return []

    def _status(self, state: int, reason: str, *, last_will: bool) -> pb.Status:
        msg = pb.Status(
            state=state,  # type: ignore[arg-type]
            connection=self._connection,
            last_will=last_will,
            agent_version=self.identity.agent_version,
            reason=reason,
        )
        msg.started_at.FromNanoseconds(int(self._started_at * 1e9))
        msg.labels.update(self.identity.labels)
        return msg

    def _properties(self, content_type: str) -> Properties:
        props = self._props.get(content_type)
        if props is None:
            props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            props.ContentType = content_type
            props.PayloadFormatIndicator = 1 if content_type == Encoding.JSON.content_type else 0
            self._props[content_type] = props
        return props

    def _set_state(self, state: ConnectionState) -> None:
        with self._state_lock:
            if self._state is not state:
                _log.debug("telemetry publisher %s -> %s", self._state.value, state.value)
            self._state = state

    def _run(self) -> None:
        lo, hi = self._backoff
        delay = lo
        while not self._stop.is_set():
            had_connection = self._session()
            if self._stop.is_set():
                break
            delay = lo if had_connection else min(hi, delay * 2)
            self._set_state(ConnectionState.BACKOFF)
            self._stop.wait(random.uniform(delay / 2, delay))

    def _new_client(self, session: _Session) -> mqtt.Client:
        client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self._client_id,
            protocol=mqtt.MQTTv5,
            reconnect_on_failure=False,
        )
        client.connect_timeout = self._connect_timeout
        client.max_inflight_messages_set(self._window)
        client.on_connect = session.on_connect
        client.on_disconnect = session.on_disconnect
        client.on_publish = session.on_publish
        client.on_message = session.on_message
        self.broker.configure(client)
        will = self._status(pb.Status.STATE_OFFLINE, "connection lost", last_will=True)
        stamp(will, self.identity, self.spool.reserve_sequence(), self._models())
        will_props = Properties(PacketTypes.WILLMESSAGE)  # type: ignore[no-untyped-call]
        will_props.ContentType = self.encoding.content_type
        will_props.PayloadFormatIndicator = 1 if self.encoding is Encoding.JSON else 0
        client.will_set(
            topic(self.identity, "status"),
            encode(will, self.encoding),
            qos=1,
            retain=True,
            properties=will_props,
        )
        return client

    def _session(self) -> bool:
        """One connection, from connect to loss or stop. Returns whether it got connected."""
        self._set_state(ConnectionState.CONNECTING)
        self._connection += 1
        session = _Session(self._wake, self.identity)
        client = self._new_client(session)
        try:
            client.connect(self.broker.host, self.broker.port, keepalive=self._keepalive, clean_start=True)
        except (OSError, ValueError) as exc:
            self._connect_failed(f"{type(exc).__name__}: {exc}")
            return False
        client.loop_start()
        try:
            deadline = time.monotonic() + self._connect_timeout
            while not (session.connected.is_set() or session.closed.is_set() or self._stop.is_set()):
                if time.monotonic() >= deadline:
                    break
                session.connected.wait(0.05)
            if not session.connected.is_set():
                self._connect_failed(session.refused or "no CONNACK")
                return False
            with self._state_lock:
                self._connections += 1
            self._set_state(ConnectionState.CONNECTED)
            _log.info("telemetry connected to %s", self.broker.redacted_url)
            if self.delivery is Delivery.CONTROLLER:
                client.subscribe(ack_topic(self.identity), qos=1)  # the retained watermark comes first
            with self._status_lock:
                if not self._draining.is_set():
                    self.publish_status(pb.Status.STATE_ONLINE, "connected")
            self._send_loop(client, session)
            return True
        finally:
            self._close(client, session)

    def _connect_failed(self, why: str) -> None:
        with self._state_lock:
            self._connect_failures += 1
            first = self._connect_failures == 1
        (_log.warning if first else _log.debug)("telemetry broker %s unreachable: %s", self.broker.redacted_url, why)

    def _close(self, client: mqtt.Client, session: _Session) -> None:
        if session.connected.is_set() and not session.closed.is_set():
            # A clean disconnect suppresses the Last Will; ask for it when our OFFLINE status is still queued.
            reason = None
            if len(self.spool) > 0:
                reason = ReasonCode(PacketTypes.DISCONNECT, "Disconnect with will message")
            client.disconnect(reasoncode=reason)
            session.closed.wait(1.0)
        client.loop_stop()
        with self._state_lock:
            self._inflight = 0

    def _send_loop(self, client: mqtt.Client, session: _Session) -> None:
        """Send spooled entries in id order; delete what is delivered (``_delivery``).

        A PUBACK "No matching subscribers" (0x10) on a non-retained message means nobody received it (no
        controller running yet, or a broker restart lost the shared subscription): sending pauses for
        ``hold_s``, rewinds to the oldest such entry and probes one message at a time until a subscriber
        takes one again (connections start probing too), so a controller that subscribes mid-window
        receives a device's messages in order. In controller delivery this is only a shortcut: what the
        controllers did not store comes back when its acknowledgement does not.
        """
        cursor = 0
        inflight: dict[int, tuple[int, bool]] = {}  # PUBACK pending: mid -> (entry id, retained)
        rewind: int | None = None
        probing = True
        track = self._tracker
        track.reset()
        controller = self.delivery is Delivery.CONTROLLER
        while not session.closed.is_set():
            self._wake.clear()
            rewind, probing = self._pubacks(session, inflight, rewind, probing, controller)
            if controller:
                self._watermark(session, track)
                if track.due(time.monotonic()):
                    self._resend(track)
                    cursor = 0
            if self._stop.is_set():
                return
            if rewind is not None:
                if inflight:
                    self._wake.wait(0.5)
                    continue
                cursor, rewind, probing = rewind, None, True
                if self._stop.wait(self._hold_s):
                    return
            room = (1 if probing else self._window) - len(inflight)
            limit = track.room(cursor) if controller else None
            if limit is not None:
                room = min(room, limit)
            if room > 0:
                for entry in self.spool.read_after(cursor, room):
                    if not self._send(client, entry, inflight, controller):
                        return
                    cursor = entry.id
            with self._state_lock:
                self._inflight = len(inflight)
            self._wake.wait(0.5)

    def _send(self, client: mqtt.Client, entry: SpoolEntry, inflight: dict[int, tuple[int, bool]], chain: bool) -> bool:
        payload = with_prev(entry.payload, entry.content_type, entry.prev) if chain else entry.payload
        info = client.publish(
            entry.topic, payload, qos=entry.qos, retain=entry.retain, properties=self._properties(entry.content_type)
        )
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            return False
        inflight[info.mid] = (entry.id, entry.retain)
        if chain:
            self._tracker.sent(entry.id, entry.seq, time.monotonic())
        with self._state_lock:
            self._sent += 1
        return True

    def _pubacks(
        self,
        session: _Session,
        inflight: dict[int, tuple[int, bool]],
        rewind: int | None,
        probing: bool,
        controller: bool,
    ) -> tuple[int | None, bool]:
        """Consume the PUBACKs that arrived; returns (rewind, probing). With broker delivery a PUBACK
        deletes the entry; a refusal (0x80 and above: not authorised, invalid) deletes it in either mode."""
        done: list[int] = []
        while session.acks:
            mid, code, why = session.acks.popleft()
            sent = inflight.pop(mid, None)
            if sent is None:
                continue
            entry_id, retained = sent
            if code == _NO_SUBSCRIBERS and not retained:
                rewind = entry_id - 1 if rewind is None else min(rewind, entry_id - 1)
                with self._state_lock:
                    self._held += 1
                continue
            if code >= 0x80:
                # A refusal is permanent for this message (not authorised, payload invalid): drop it.
                _log.warning("broker refused telemetry message: %s", why)
                with self._state_lock:
                    self._rejected += 1
                done.append(entry_id)
                continue
            if not retained:
                probing = False
            if not controller:
                done.append(entry_id)
        if done:
            self.spool.ack(done)
            with self._state_lock:
                self._acked += len(done)
        return rewind, probing

    def _watermark(self, session: _Session, track: AckTracker) -> None:
        """Trim the spool to the highest acknowledgement received."""
        if not track.outstanding:
            self._progress_at = time.monotonic()  # nothing waits for an acknowledgement
        if not session.watermarks:
            if (
                not self._no_ack_warned
                and track.outstanding
                and time.monotonic() - self._progress_at > max(60.0, 6 * track.base_timeout_s)
            ):
                self._no_ack_warned = True
                _log.warning(
                    "telemetry: no acknowledgement from a controller for %.0f s; %d message(s) kept in the "
                    "spool. Is an edgefleet controller ingesting fleet %s? Without one, set delivery: broker",
                    time.monotonic() - self._progress_at,
                    len(self.spool),
                    self.identity.fleet,
                )
            return
        watermark = max(w for w, _ in session.watermarks)
        self._highest = max(self._highest, *(h for _, h in session.watermarks))
        session.watermarks.clear()
        with self._state_lock:
            self._watermarks += 1
        upto = watermark
        if watermark >= self.spool.next_sequence:
            # numbers this spool never gave out: the controller holds an earlier install of this device
            _log.warning(
                "telemetry: the controller acknowledged up to sequence %d, beyond this spool's %d; "
                "numbering on from %d",
                watermark,
                self.spool.next_sequence - 1,
                watermark + 1,
            )
            self.spool.skip_sequences_to(watermark + 1)
            upto = track.max_sent_seq
        covered = track.covered(upto)
        removed = self.spool.trim(upto)
        if covered or removed:
            self._progress_at = time.monotonic()
            self._no_ack_warned = False
        with self._state_lock:
            self._acked += removed

    def _resend(self, track: AckTracker) -> None:
        """Go back to the oldest entry. One that was sent in three passes while the controllers went on
        storing later messages is one they cannot store (larger than their payload limit, say): given up,
        so the rest of the spool is not held behind it."""
        _log.info(
            "telemetry: %d message(s) not acknowledged after %.0f s; sending again from the oldest",
            track.outstanding,
            track.oldest_wait(time.monotonic()),
        )
        track.rewound()
        with self._state_lock:
            self._resends += 1
        oldest = self.spool.read_after(0, 1)
        if not oldest or self._highest <= oldest[0].seq:
            self._stuck = (0, 0)
            return
        entry_id, passes = self._stuck
        passes = passes + 1 if entry_id == oldest[0].id else 1
        self._stuck = (oldest[0].id, passes)
        if passes >= 3:
            _log.warning(
                "telemetry: message %d (%s) was sent %d times and no controller stores it, while later ones "
                "are stored; given up (counted as rejected). The controller's log says why",
                oldest[0].seq,
                oldest[0].topic.rsplit("/", 1)[-1],
                passes,
            )
            self.spool.ack([oldest[0].id])
            self._stuck = (0, 0)
            with self._state_lock:
                self._rejected += 1
