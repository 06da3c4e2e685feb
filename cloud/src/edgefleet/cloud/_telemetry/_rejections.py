"""Rejected telemetry, made visible: counted by reason (``Ingester.stats().rejected``, the controller's
``edgefleet_telemetry_rejected_total{reason}``), by device and reason in the database
(``telemetry_rejections``: ``edgefleet telemetry show``, ``devices show``), and one WARNING line per
device and reason per minute (with how many more there were since the last one)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RejectionLog", "RejectionRow"]

_log = logging.getLogger("edgefleet.cloud._telemetry._ingest")  # where operators look for ingest lines
_MAX_KEYS = 100_000


@dataclass(frozen=True)
class RejectionRow:
    """Rejections of one device for one reason since the last flush to the database."""

    fleet: str
    device: str
    reason: str
    count: int
    last_at: float
    last_detail: str


class RejectionLog:
    """Thread-safe (the network thread adds rate-limited messages, the writer thread the rest)."""

    def __init__(self, warn_every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.warn_every_s = warn_every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._by_reason: Counter[str] = Counter()
        self._warned: dict[tuple[str, str], tuple[float, int]] = {}  # key -> (last warning, since then)
        self._pending: dict[tuple[str, str], RejectionRow] = {}

    def add(self, reason: str, where: str | None, detail: str, topic: str = "") -> None:
        """One rejected message; ``where`` is ``<fleet>/<device>`` when the topic names a device."""
        now = self._clock()
        key = (where or "", reason)
        with self._lock:
            self._by_reason[reason] += 1
            last, since = self._warned.get(key, (-1e18, 0))
            warn = now - last >= self.warn_every_s
            self._warned[key] = (now, 0) if warn else (last, since + 1)
            if len(self._warned) > _MAX_KEYS:
                self._warned = {k: v for k, v in self._warned.items() if now - v[0] < self.warn_every_s}
            if where:
                fleet, _, device = where.partition("/")
                had = self._pending.get(key)
                self._pending[key] = RejectionRow(
                    fleet, device, reason, (had.count if had else 0) + 1, time.time(), detail[:300]
                )
        if warn:
            more = f" ({since} more since the last warning)" if since else ""
            if where:
                _log.warning("telemetry from %s rejected (%s): %s%s", where, reason, detail[:200], more)
            else:
                _log.warning("telemetry on %r rejected (%s): %s%s", topic[:200], reason, detail[:200], more)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._by_reason)

    def take(self) -> list[RejectionRow]:
        """What to add to the database since the last call (the caller puts it back if that fails)."""
        with self._lock:
            rows, self._pending = list(self._pending.values()), {}
        return rows

    def put_back(self, rows: list[RejectionRow]) -> None:
        with self._lock:
            for r in rows:
                key = (f"{r.fleet}/{r.device}", r.reason)
                had = self._pending.get(key)
                if had is None:
                    self._pending[key] = r
                else:
                    self._pending[key] = RejectionRow(
                        r.fleet, r.device, r.reason, had.count + r.count, had.last_at, had.last_detail
                    )
