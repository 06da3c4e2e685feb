"""Agent status reports are coalesced per device and written in one transaction."""

from __future__ import annotations

import asyncio
from pathlib import Path

from edgefleet.cloud._fleet_store import Store
from edgefleet.cloud._status_writer import StatusWriter


def test_latest_status_per_device_in_one_write(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        for d in ("cam-a", "cam-b"):
            store.hello(d, {"site": "x"}, {}, [], f"r#{d}")

        async def scenario() -> tuple[int, int]:
            writer = StatusWriter(store, interval_s=0.05)
            for frames in range(1, 101):  # 100 reports from cam-a before any write: only the last counts
                writer.submit("cam-a", [{"name": "default", "fps": float(frames)}], {"frames_in": frames})
            writer.submit("cam-b", [], {"frames_in": 7})
            first = await writer.flush()
            task = asyncio.create_task(writer.run())
            writer.submit("cam-b", [], {"frames_in": 8})
            await asyncio.sleep(0.2)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            writer.submit("cam-a", [], {"frames_in": 101})  # after run() ended: nothing writes it
            return first, await writer.flush()

        first, last = asyncio.run(scenario())
        assert first == 2 and last == 1
        a, b = store.get_device("cam-a"), store.get_device("cam-b")
        assert a["health"] == {"frames_in": 101} and b["health"] == {"frames_in": 8}
        assert a["health_at"] > 0 and a["last_seen"] == a["health_at"]
    finally:
        store.close()


def test_run_writes_what_is_left_when_cancelled(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        store.hello("cam-a", {}, {}, [], "r#1")

        async def scenario() -> None:
            writer = StatusWriter(store, interval_s=10.0)
            task = asyncio.create_task(writer.run())
            writer.submit("cam-a", [], {"frames_in": 1})
            await asyncio.sleep(0.05)  # first batch written, now sleeping 10 s
            writer.submit("cam-a", [], {"frames_in": 2})
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

        asyncio.run(scenario())
        assert store.get_device("cam-a")["health"] == {"frames_in": 2}
    finally:
        store.close()
