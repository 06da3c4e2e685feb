"""The controller's acknowledgements: after a batch is committed, each device with chained messages in it
gets its watermark published, retained with QoS 1, on ``edgefleet/v1/<fleet>/<device>/ack`` (an ``Ack``
in protobuf's JSON mapping). At most one per device every ``interval_s`` (the newest watermark wins), so
a device sending hundreds of messages a second costs a few acknowledgements, and a device that sends
again what is already stored (it missed the acknowledgement) is acknowledged again."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

from edgefleet.sdk.kit import ack_topic

__all__ = ["AckPublisher", "ack_payload"]


def ack_payload(fleet: str, device: str, watermark: int, highest: int, replica: str, now: float) -> bytes:
    """An ``Ack`` message in protobuf's JSON mapping (64-bit integers as strings)."""
    stamp = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    body = {
        "deviceId": device,
        "fleet": fleet,
        "sequence": str(watermark),
        "time": stamp,
        "replica": replica,
        "highest": str(highest),
    }
    return json.dumps(body, separators=(",", ":")).encode()


class AckPublisher:
    """Coalesces watermarks per device and publishes the due ones through ``send(topic, payload)``
    (which returns False when the connection is down: they stay due).

    Example::

        acks = AckPublisher(lambda t, p: client.publish(t, p, qos=1, retain=True).rc == 0, "r1")
        acks.note({"cam-1": ("lab", 42, 42)})
        acks.flush()
    """

    def __init__(self, send: Callable[[str, bytes], bool], replica: str, interval_s: float = 0.5) -> None:
        self._send = send
        self.replica = replica
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[str, int, int]] = {}  # device -> (fleet, watermark, highest)
        self._last: dict[str, float] = {}  # device -> when its last acknowledgement went
        self.published = 0

    def note(self, watermarks: dict[str, tuple[str, int, int]]) -> None:
        """Watermarks to acknowledge (device id -> (fleet, watermark, highest stored)); a newer one replaces
        an older."""
        with self._lock:
            for device, (fleet, mark, top) in watermarks.items():
                had = self._pending.get(device)
                if had is None or had[1] <= mark:
                    self._pending[device] = (fleet, mark, max(top, had[2] if had else 0))

    def flush(self, now: float | None = None) -> int:
        """Publish every acknowledgement that is due; returns how many went."""
        t = time.monotonic() if now is None else now
        with self._lock:
            due = [(d, *v) for d, v in self._pending.items() if t - self._last.get(d, -1e18) >= self.interval_s]
        sent = 0
        wall = time.time()
        for device, fleet, mark, top in due:
            body = ack_payload(fleet, device, mark, top, self.replica, wall)
            if not self._send(ack_topic(fleet, device), body):
                break  # not connected: they stay due
            sent += 1
            with self._lock:
                if self._pending.get(device, (fleet, mark, top))[1] <= mark:
                    self._pending.pop(device, None)
                self._last[device] = t
        if len(self._last) > 200_000:  # bounded: forget devices not acknowledged for a while
            with self._lock:
                self._last = {d: at for d, at in self._last.items() if t - at < 10 * self.interval_s}
        self.published += sent
        return sent

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)
