"""Agent status reports, written in batches.

Every connected agent reports its status about once a second; one transaction per report made 1,000
agents 1,000 commits a second, which on PostgreSQL kept the database pool busy enough to delay commands
(the first agent of a 1,000-device deploy got its command 6.7 s after the rollout started). The servicer
hands each report to :class:`StatusWriter`, which keeps the latest per device and writes them all in one
transaction every ``interval_s``: a report reaches the database at most that much later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ._errors import DatabaseError
from ._fleet_store import Store

__all__ = ["StatusWriter"]

_log = logging.getLogger(__name__)


class StatusWriter:
    def __init__(self, store: Store, interval_s: float = 0.25) -> None:
        self.store = store
        self.interval_s = interval_s
        self._latest: dict[str, dict[str, Any]] = {}
        self._event = asyncio.Event()

    def submit(self, device_id: str, pipelines: list[dict[str, Any]], health: dict[str, Any]) -> None:
        """Record a device's newest status (a newer one before the next write replaces it)."""
        self._latest[device_id] = {"device_id": device_id, "pipelines": pipelines, "health": health, "at": time.time()}
        self._event.set()

    async def flush(self) -> int:
        """Write what is waiting now; returns how many devices were written."""
        if not self._latest:
            return 0
        rows, self._latest = list(self._latest.values()), {}
        try:
            await self.store.call(self.store.status_many, rows)
        except DatabaseError as exc:
            _log.warning("agent status reports not stored (%s); the next ones will be", exc)
            return 0
        return len(rows)

    async def run(self) -> None:
        """Write batches until cancelled; the last batch is written on the way out."""
        try:
            while True:
                await self._event.wait()
                self._event.clear()
                await self.flush()
                await asyncio.sleep(self.interval_s)
        finally:
            await asyncio.shield(self.flush())
