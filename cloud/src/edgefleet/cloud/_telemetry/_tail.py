"""Live telemetry of one device straight from the broker (``edgefleet telemetry tail``)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.subscribeoptions import SubscribeOptions

from edgefleet.sdk.kit import TOPIC_KINDS, TopicError, topic_filters

from ._errors import TelemetryIngestError
from ._mqtt_connection import BrokerAddress
from ._validate import Parsed, Rejected, parse_message

__all__ = ["tail"]

_log = logging.getLogger(__name__)


def tail(
    broker: BrokerAddress,
    device_id: str,
    *,
    fleet: str = "+",
    kind: str = "+",
    timeout_s: float | None = None,
    connect_timeout_s: float = 5.0,
    max_payload_bytes: int = 256 * 1024,
) -> Iterator[Parsed | Rejected]:
    """Yield each message (or its rejection) for ``device_id`` until ``timeout_s`` or the caller stops.

    Retained status arrives first. Uses a private, non-shared subscription: it sees every message, and
    never takes one away from the ingesting controller replicas. A device id or fleet that is not one topic
    level (or ``+``), or a kind that is not status, telemetry, events or ``+``, raises
    TelemetryIngestError here, before anything connects.
    """
    if kind != "+" and kind not in TOPIC_KINDS:  # not the acknowledgements on .../ack
        raise TelemetryIngestError(f"kind {kind!r} must be one of {', '.join(TOPIC_KINDS)} or +")
    try:
        kinds = TOPIC_KINDS if kind == "+" else (kind,)
        topics = topic_filters(fleet=fleet, device=device_id, kinds=kinds)
    except TopicError as exc:
        raise TelemetryIngestError(str(exc)) from None
    return _tail(broker, topics, timeout_s, connect_timeout_s, max_payload_bytes)


def _tail(
    broker: BrokerAddress, topics: list[str], timeout_s: float | None, connect_timeout_s: float, max_payload_bytes: int
) -> Iterator[Parsed | Rejected]:
    inbox: queue.Queue[Parsed | Rejected] = queue.Queue(maxsize=10_000)
    connected = threading.Event()
    failure: list[str] = []
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    broker.configure(client)

    def on_connect(c: mqtt.Client, _u: object, _f: object, reason: object, _p: object) -> None:
        if getattr(reason, "is_failure", False):
            failure.append(str(reason))
        else:
            c.subscribe([(t, SubscribeOptions(qos=1)) for t in topics])
        connected.set()

    def on_message(_c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        ctype = getattr(getattr(msg, "properties", None), "ContentType", None)
        try:
            item: Parsed | Rejected = parse_message(msg.topic, bytes(msg.payload), ctype, max_payload_bytes)
        except Rejected as rej:
            item = rej
        try:
            inbox.put_nowait(item)
        except queue.Full:
            _log.warning("tail: output too slow, message dropped")

    client.on_connect = on_connect
    client.on_message = on_message
    try:
        client.connect(broker.host, broker.port, keepalive=30)
    except OSError as exc:
        raise TelemetryIngestError(f"cannot reach broker {broker.redacted_url}: {exc}") from None
    client.loop_start()
    try:
        if not connected.wait(connect_timeout_s):
            raise TelemetryIngestError(f"broker {broker.redacted_url}: no answer in {connect_timeout_s:g} s")
        if failure:
            raise TelemetryIngestError(f"broker {broker.redacted_url} refused: {failure[0]}")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while deadline is None or time.monotonic() < deadline:
            try:
                yield inbox.get(timeout=0.2)
            except queue.Empty:
                continue
    finally:
        client.disconnect()
        client.loop_stop()
