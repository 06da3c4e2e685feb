"""MQTT 5 ingestion: a shared subscription, validation, batched dedup writes, acknowledgement after commit.

Threads: paho's network thread only enqueues (bounded queue; when it is full the network thread waits,
which pushes back on the broker through TCP instead of dropping). One writer thread validates, stores a
batch in one transaction and only then sends the PUBACKs (``manual_ack``), so a message the broker
considers delivered is in the database, and publishes the devices' acknowledgement watermarks
(``_acks``): what the agents delete their spooled messages on. The session is persistent (clean start
off, session expiry), so messages published while this replica is away wait in the broker for it.
"""

from __future__ import annotations

import enum
import logging
import queue
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from edgefleet.sdk.kit import INGEST_SHARE_GROUP, TOPIC_ROOT, topic_filters, topic_level_problem

from ._acks import AckPublisher
from ._buffered_client import BufferedClient
from ._errors import TelemetryIngestError
from ._mqtt_connection import BrokerAddress
from ._rejections import RejectionLog
from ._telemetry_store import TelemetryStore
from ._validate import KINDS, Parsed, Rejected, parse_message

__all__ = ["IngestStats", "Ingester", "IngesterState"]

_log = logging.getLogger(__name__)


class IngesterState(str, enum.Enum):
    STOPPED = "stopped"
    CONNECTING = "connecting"
    SUBSCRIBED = "subscribed"
    DISCONNECTED = "disconnected"


@dataclass(frozen=True)
class IngestStats:
    state: IngesterState
    received: int
    stored: int
    duplicates: int
    rejected: dict[str, int] = field(default_factory=dict)
    store_errors: int = 0
    queue_depth: int = 0
    queue_full_waits: int = 0
    batches: int = 0
    rate_limited: dict[str, int] = field(default_factory=dict)  # "<fleet>/<device>" -> messages dropped
    cpu_s: dict[str, float] = field(default_factory=dict)  # writer-thread CPU seconds: parse, store, ack
    acks_published: int = 0  # acknowledgement watermarks published to the devices

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())


class _DeviceLimiter:
    """A token bucket per ``<fleet>/<device>`` (status apart, so a flood of telemetry cannot hide a
    device's online/offline changes). Bounded: past ``max_devices`` buckets, full ones are forgotten."""

    def __init__(self, rate_per_s: float, burst: int, max_devices: int = 100_000) -> None:
        self.rate, self.burst, self.max_devices = rate_per_s, float(burst), max_devices
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def allow(self, key: str, now: float) -> bool:
        tokens, at = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        ok = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if ok else tokens, now)
        if len(self._buckets) > self.max_devices:
            self._buckets = {k: (t, a) for k, (t, a) in self._buckets.items() if t + (now - a) * self.rate < self.burst}
        return ok


_ROOT = TOPIC_ROOT + "/"


def _device_key(topic: str) -> str | None:
    """The rate limiter's key, on paho's network thread: cheaper than the kit's parse_topic, which the
    writer thread runs on every message."""
    parts = topic.split("/")
    if len(parts) != 5 or not topic.startswith(_ROOT):
        return None  # rejected later as a wrong topic
    return f"{parts[2]}/{parts[3]}" + ("/status" if parts[4] == "status" else "")


_ACK_PROPERTIES = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
_ACK_PROPERTIES.ContentType = "application/json"
_ACK_PROPERTIES.PayloadFormatIndicator = 1


class _Item(NamedTuple):  # one per message: a tuple is the cheapest record
    topic: str
    payload: bytes
    content_type: str | None
    mid: int
    qos: int
    generation: int


class Ingester:
    """Subscribes ``$share/edgefleet-ingest/edgefleet/v1/+/+/<kind>`` for each kind (status, telemetry,
    events; ``<fleet>`` for the 3rd level when given), stores what it receives and acknowledges it.

    Example::

        store = TelemetryStore(create_engine("sqlite:///controller.db"))
        with Ingester(parse_broker_url("mqtt://127.0.0.1:1883"), store) as ingester:
            ...
            store.health("cam-1", timedelta(minutes=5))
    """

    def __init__(
        self,
        broker: BrokerAddress,
        store: TelemetryStore,
        *,
        client_id: str | None = None,
        shared: bool = True,
        fleet: str | None = None,
        max_payload_bytes: int = 256 * 1024,
        queue_size: int = 10_000,
        batch_max: int = 500,
        session_expiry_s: int = 3600,
        compact_every_s: float | None = 600.0,
        retention: dict[str, Any] | None = None,
        on_stored: Callable[[list[Parsed]], None] | None = None,  # called with each batch newly stored
        device_rate_per_s: float | None = 200.0,
        device_burst: int = 5000,
        buffered_reads: bool = True,
        share_group: str = INGEST_SHARE_GROUP,
        acks: bool = True,
        ack_interval_s: float = 0.5,
        not_devices: frozenset[str] = frozenset(),
        replica: str | None = None,
    ) -> None:
        """``device_rate_per_s`` / ``device_burst``: what one device may send (a token bucket per device);
        beyond it messages are acknowledged, dropped and counted (``stats().rate_limited``), and other
        devices are unaffected. The burst lets an agent replay its spool after an outage; None: no limit.
        ``buffered_reads``: read the socket 64 KiB at a time (``_buffered_client.BufferedClient``); False: paho as is.
        ``share_group``: the shared subscription's group (every replica the same). ``acks``: publish the
        devices' acknowledgement watermarks (at most one per device per ``ack_interval_s``).
        ``not_devices``: certificate names of other roles; telemetry under them is rejected.
        """
        self._buffered_reads = buffered_reads
        self.broker = broker
        self.store = store
        self.client_id = client_id or f"edgefleet-ingest-{socket.gethostname()}"
        for what, value in (("fleet", fleet), ("share group", share_group)):
            problem = None if value is None else topic_level_problem(value)
            if problem is not None:
                raise TelemetryIngestError(f"{what} {value!r} {problem}")
        level = "+" if fleet is None else fleet
        # one subscription per kind (not the acknowledgements)
        self.topics = topic_filters(fleet=level, kinds=KINDS, share_group=share_group if shared else None)
        self.topic = f"{self.topics[0].rsplit('/', 1)[0]}/{{{','.join(KINDS)}}}"  # how logs name them
        self._not_devices = frozenset(not_devices)
        self._rejections = RejectionLog()
        self._rejections_saved = 0.0
        self._acks = AckPublisher(self._publish_ack, replica or self.client_id, ack_interval_s) if acks else None
        self._max_payload = max_payload_bytes
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=queue_size)
        self._batch_max = batch_max
        self._session_expiry = session_expiry_s
        self._compact_every = compact_every_s
        self._retention = dict(retention or {})
        self._on_stored = on_stored
        self._lock = threading.Lock()
        # Held while acknowledging a batch and while a connection ends or begins: a packet id acknowledged
        # on the next connection would acknowledge a different message there.
        self._ack_lock = threading.Lock()
        self._state = IngesterState.STOPPED
        self._generation = 0
        self._counts: Counter[str] = Counter()
        self._limited: Counter[str] = Counter()
        self._cpu: dict[str, float] = {"parse": 0.0, "store": 0.0, "ack": 0.0, "publish_acks": 0.0}
        self._limiter = _DeviceLimiter(device_rate_per_s, device_burst) if device_rate_per_s else None
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._unreachable = False  # warned about the broker being unreachable since the last connection
        self._client: mqtt.Client | None = None
        self._writer: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        if self._client is not None:
            return
        self._stop.clear()
        client = (BufferedClient if self._buffered_reads else mqtt.Client)(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=mqtt.MQTTv5,
            manual_ack=True,
        )
        client.reconnect_delay_set(0.1, 5)  # type: ignore[arg-type]  # paho accepts float seconds
        client.max_queued_messages_set(0)
        self.broker.configure(client)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = self._session_expiry
        props.ReceiveMaximum = min(65535, max(10, self._batch_max * 2))
        self._set_state(IngesterState.CONNECTING)
        client.connect_async(self.broker.host, self.broker.port, keepalive=30, clean_start=False, properties=props)
        client.loop_start()
        self._client = client
        self._writer = threading.Thread(target=self._write_loop, name="edgefleet-telemetry-ingest", daemon=True)
        self._writer.start()

    def wait_subscribed(self, timeout_s: float) -> bool:
        """Wait until the subscription is acknowledged (after start or a reconnect)."""
        return self._subscribed.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Store what is queued (bounded by ``timeout_s``), then disconnect; the broker keeps the session."""
        client, self._client = self._client, None
        if client is None:
            return
        deadline = time.monotonic() + timeout_s
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.01)
        self._stop.set()
        if self._writer is not None:
            self._writer.join(timeout=max(0.1, deadline - time.monotonic()) + 1.0)
            self._writer = None
        client.disconnect()
        client.loop_stop()
        self._set_state(IngesterState.STOPPED)

    def __enter__(self) -> Ingester:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- observation -------------------------------------------------------------------------------
    @property
    def state(self) -> IngesterState:
        with self._lock:
            return self._state

    def stats(self) -> IngestStats:
        with self._lock:
            return IngestStats(
                state=self._state,
                received=self._counts["received"],
                stored=self._counts["stored"],
                duplicates=self._counts["duplicates"],
                rejected=self._rejections.counts(),
                store_errors=self._counts["store_errors"],
                queue_depth=self._queue.qsize(),
                queue_full_waits=self._counts["queue_full_waits"],
                batches=self._counts["batches"],
                rate_limited=dict(self._limited),
                cpu_s=dict(self._cpu),
                acks_published=self._acks.published if self._acks is not None else 0,
            )

    # --- paho callbacks (network thread) -----------------------------------------------------------
    def _set_state(self, state: IngesterState) -> None:
        with self._lock:
            self._state = state

    def _on_connect(self, client: mqtt.Client, _u: Any, flags: Any, reason: ReasonCode, _p: Any) -> None:
        if reason.is_failure:
            _log.warning("telemetry ingest: broker %s refused: %s", self.broker.redacted_url, reason)
            return
        with self._ack_lock:
            self._generation += 1
        self._unreachable = False
        _log.info(
            "telemetry ingest connected to %s (session present: %s)",
            self.broker.redacted_url,
            getattr(flags, "session_present", None),
        )
        client.subscribe([(t, SubscribeOptions(qos=1)) for t in self.topics])

    def _on_connect_fail(self, _c: mqtt.Client, _u: Any) -> None:
        """No TCP connection (refused, unreachable, DNS): said once per outage, retried with backoff."""
        if not self._unreachable:
            self._unreachable = True
            _log.warning("telemetry ingest: broker %s unreachable; retrying", self.broker.redacted_url)

    def _on_subscribe(self, _c: mqtt.Client, _u: Any, _mid: int, reasons: list[ReasonCode], _p: Any) -> None:
        if any(r.is_failure for r in reasons):
            _log.error("telemetry ingest: subscription to %s refused: %s", self.topic, reasons)
            return
        self._set_state(IngesterState.SUBSCRIBED)
        self._subscribed.set()

    def _on_disconnect(self, _c: mqtt.Client, _u: Any, _f: Any, reason: ReasonCode, _p: Any) -> None:
        self._subscribed.clear()
        with self._ack_lock:  # what this connection delivered is not acknowledged any more
            self._generation += 1
        if self._client is not None:
            _log.warning("telemetry ingest disconnected: %s (reconnecting)", reason)
            self._set_state(IngesterState.DISCONNECTED)

    def _on_message(self, _c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        props = getattr(msg, "properties", None)
        content_type = getattr(props, "ContentType", None) if props is not None else None
        key = _device_key(msg.topic) if self._limiter is not None else None
        with self._lock:
            self._counts["received"] += 1
            generation = self._generation
            limited = key is not None and self._limiter is not None and not self._limiter.allow(key, time.monotonic())
            if limited:
                self._limited[key] += 1  # type: ignore[index]
        if limited:  # acknowledged, or the broker's in-flight window would stall every device
            where = key.removesuffix("/status") if key else None
            self._rejections.add("rate_limited", where, "over its rate limit; dropped", msg.topic)
            if msg.qos > 0 and self._client is not None:
                self._client.ack(msg.mid, msg.qos)
            return
        item = _Item(msg.topic, bytes(msg.payload), content_type, msg.mid, msg.qos, generation)
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                with self._lock:
                    self._counts["queue_full_waits"] += 1

    # --- writer thread -----------------------------------------------------------------------------
    def _write_loop(self) -> None:
        last_compact = time.monotonic()
        while not self._stop.is_set() or not self._queue.empty():
            try:
                first = self._queue.get(timeout=0.2)
            except queue.Empty:
                last_compact = self._maybe_compact(last_compact)
                self._housekeeping()
                continue
            items = [first]
            while len(items) < self._batch_max:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._process(items)
            except Exception:  # a bug must not end ingestion: the batch is not acknowledged, so it comes back
                _log.exception("telemetry ingest: batch of %d failed unexpectedly", len(items))
                with self._lock:
                    self._counts["store_errors"] += 1
            last_compact = self._maybe_compact(last_compact)
            self._housekeeping()

    def _housekeeping(self) -> None:
        """Due acknowledgements out; rejection counts into the database (at most once a second)."""
        if self._acks is not None:
            self._acks.flush()
        now = time.monotonic()
        if now - self._rejections_saved < 1.0:
            return
        self._rejections_saved = now
        rows = self._rejections.take()
        try:
            self.store.record_rejections(rows)
        except TelemetryIngestError as exc:
            _log.warning("telemetry rejection counts not stored (kept for the next try): %s", exc)
            self._rejections.put_back(rows)

    def _publish_ack(self, topic: str, payload: bytes) -> bool:
        client = self._client
        if client is None or not client.is_connected():
            return False
        info = client.publish(topic, payload, qos=1, retain=True, properties=_ACK_PROPERTIES)
        return bool(info.rc == mqtt.MQTT_ERR_SUCCESS)

    def _process(self, items: list[_Item]) -> None:
        t0 = time.thread_time()
        parsed: list[Parsed] = []
        links: list[tuple[str, str, int, int]] = []
        for it in items:
            try:
                parsed.append(
                    parse_message(it.topic, it.payload, it.content_type, self._max_payload, self._not_devices)
                )
            except Rejected as rej:
                self._rejections.add(rej.reason, rej.device, rej.detail, it.topic)
                if rej.link is not None and rej.device is not None:
                    fleet, _, device = rej.device.partition("/")
                    links.append((fleet, device, *rej.link))
            except Exception:  # a payload our validator did not foresee: counted and dropped, never fatal
                _log.exception("telemetry on %s could not be validated; dropped (counted 'internal')", it.topic[:200])
                self._rejections.add("internal", None, "the validator failed", it.topic)
        t1 = time.thread_time()
        try:
            result = self.store.write(parsed, links=links)
        except Exception:
            # Not acknowledged: the broker redelivers after the next reconnect. Reconnect now.
            _log.exception("telemetry batch of %d not stored", len(parsed))
            with self._lock:
                self._counts["store_errors"] += 1
            if self._client is not None:
                self._client.reconnect()
            return
        t2 = time.thread_time()
        with self._lock:
            self._counts["stored"] += result.stored
            self._counts["duplicates"] += result.duplicates
            self._counts["batches"] += 1
        client = self._client
        if client is not None:
            with self._ack_lock:
                for it in items:
                    if it.qos > 0 and it.generation == self._generation:
                        client.ack(it.mid, it.qos)
        t3 = time.thread_time()
        if self._acks is not None and result.acks:
            self._acks.note(result.acks)
            self._acks.flush()
        t4 = time.thread_time()
        with self._lock:
            self._cpu["parse"] += t1 - t0
            self._cpu["store"] += t2 - t1
            self._cpu["ack"] += t3 - t2
            self._cpu["publish_acks"] += t4 - t3
        if self._on_stored is not None and result.fresh:
            try:
                self._on_stored(result.fresh)
            except Exception:  # a consumer's bug (rollout gates, tail) must not stop ingestion
                _log.exception("telemetry on_stored callback failed")

    def _maybe_compact(self, last: float) -> float:
        if self._compact_every is None or time.monotonic() - last < self._compact_every:
            return last
        try:
            self.store.compact(**self._retention)
        except TelemetryIngestError:
            _log.exception("telemetry retention failed")
        return time.monotonic()
