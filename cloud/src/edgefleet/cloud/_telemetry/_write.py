"""The SQL that stores one ingest batch: message rows with dedup, and the device-state rows.

Driver-level statements instead of SQLAlchemy Core ``insert(...)`` executemany, which spends ~10 us per row
building parameters (``tools/bench/telemetry_store_bench.py``, bench/results/telemetry-store-*.json).
Messages go in with ``INSERT ... ON CONFLICT DO NOTHING RETURNING device_id, seq`` (multi-row VALUES on
SQLite, psycopg's pipelined executemany on PostgreSQL): the rows returned are exactly the ones this
transaction stored, also with several replicas writing at once. Devices are one executemany UPDATE and one
INSERT per batch, not one UPDATE per device (50 us per message on SQLite).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from ._schema import devices, messages
from ._validate import Facts, Parsed

__all__ = [
    "MESSAGE_COLUMNS",
    "Statements",
    "advance",
    "apply_status",
    "fold_devices",
    "message_row",
    "new_device",
]

MESSAGE_COLUMNS = (
    "device_id",
    "seq",
    "fleet",
    "kind",
    "ts",
    "received_at",
    "fps",
    "p95_ms",
    "errors_total",
    "error_event",
    "payload",
    "payload_pb",
    "prev",
)
DEVICE_COLUMNS = tuple(c.name for c in devices.columns)


def message_row(p: Parsed, now: float) -> tuple[Any, ...]:
    """One ``telemetry_messages`` row, in MESSAGE_COLUMNS order."""
    f = p.facts
    text, blob = (p.payload, None) if isinstance(p.payload, str) else ("", p.payload)
    if p.kind == "telemetry":
        return (
            p.device_id, p.sequence, p.fleet, p.kind, p.time, now, f.fps, f.p95_ms, f.errors, False, text, blob, f.prev
        )  # fmt: skip
    return (p.device_id, p.sequence, p.fleet, p.kind, p.time, now, None, None, None, f.error_event, text, blob, f.prev)


def new_device(device_id: str, fleet: str) -> dict[str, Any]:
    return {
        "device_id": device_id,
        "fleet": fleet,
        "online": False,
        "status_started": 0.0,
        "status_connection": 0,
        "status_reason": "",
        "status_at": 0.0,
        "last_seen": 0.0,
        "last_seq": 0,
        "agent_version": "",
        "models": "[]",
        "fps": None,
        "p95_ms": None,
        "acked_seq": None,
    }


def apply_status(state: dict[str, Any], f: Facts) -> None:
    """Order statuses by (agent start, connection number): a Last Will never overrides a newer session."""
    key = (f.started_ns / 1e9, f.connection)
    if key < (state["status_started"], state["status_connection"]):
        return
    state["status_started"], state["status_connection"] = key
    state["online"] = f.online
    state["status_reason"] = f.reason.replace("\0", "")[:64]  # PostgreSQL text holds no NUL
    state["status_at"] = f.time_ns / 1e9
    if f.agent_version:
        state["agent_version"] = f.agent_version.replace("\0", "")[:64]


def fold_devices(
    fresh: Sequence[Parsed], known: dict[str, dict[str, Any]], now: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The device rows after ``fresh`` (newly stored messages): (updated known devices, new devices), each
    in device order (the order rows are locked in)."""
    latest: dict[str, list[Parsed]] = {}
    for p in sorted(fresh, key=lambda x: x.device_id):
        latest.setdefault(p.device_id, []).append(p)
    updates: list[dict[str, Any]] = []
    inserts: list[dict[str, Any]] = []
    for device_id, items in latest.items():
        current = known.get(device_id)
        state = dict(current) if current else new_device(device_id, items[0].fleet)
        for p in sorted(items, key=lambda x: x.sequence):
            f = p.facts
            state["last_seen"] = now
            if p.sequence > state["last_seq"]:
                state["last_seq"] = p.sequence
                if f.models:
                    state["models"] = json.dumps([{"pipeline": m[0], "name": m[1], "version": m[2]} for m in f.models])
                if p.kind == "telemetry":
                    state["fps"], state["p95_ms"] = f.fps, f.p95_ms
            if p.kind == "status":
                apply_status(state, f)
        (inserts if current is None else updates).append(state)
    return updates, inserts


def advance(watermark: int, links: dict[int, int]) -> int:
    """Follow the delivery chain: ``links`` maps sequence -> prev; a message whose prev is at or below the
    watermark says nothing between is still to come, so the watermark moves to its sequence (repeated)."""
    for prev, seq in sorted((prev, seq) for seq, prev in links.items() if seq > watermark):
        if prev > watermark:
            break  # sorted by prev: no later link is reachable either
        watermark = max(watermark, seq)
    return watermark


class Statements:
    """The write statements for one dialect (``sqlite`` or ``postgresql``)."""

    def __init__(self, dialect: str) -> None:
        mark = "?" if dialect == "sqlite" else "%s"
        self._mark = mark
        self._postgresql = dialect == "postgresql"
        limit = 32_766 if dialect != "sqlite" or sqlite3.sqlite_version_info >= (3, 32) else 999
        self.rows_per_insert = max(1, min(1000, limit // len(MESSAGE_COLUMNS)))
        self._insert_sql: dict[int, str] = {}
        others = [c for c in DEVICE_COLUMNS if c != "device_id"]
        # Identifiers come from the table definitions, values are bound: nothing here is injectable.
        assignments = ", ".join(f"{c} = {mark}" for c in others)
        self._update_devices = f"UPDATE {devices.name} SET {assignments} WHERE device_id = {mark}"  # noqa: S608
        self._device_order = (*others, "device_id")
        self._lower_prev = (
            f"UPDATE {messages.name} SET prev = {mark} WHERE device_id = {mark} AND seq = {mark}"  # noqa: S608
            f" AND (prev IS NULL OR prev > {mark})"
        )
        self._set_acked = f"UPDATE {devices.name} SET acked_seq = {mark} WHERE device_id = {mark}"  # noqa: S608
        marks = ", ".join([mark] * len(DEVICE_COLUMNS))
        self._insert_devices = (
            f"INSERT INTO {devices.name} ({', '.join(DEVICE_COLUMNS)}) VALUES ({marks}) ON CONFLICT DO NOTHING"  # noqa: S608
        )

    def _insert(self, n: int) -> str:
        sql = self._insert_sql.get(n)
        if sql is None:
            one = f"({', '.join([self._mark] * len(MESSAGE_COLUMNS))})"
            values = ", ".join([one] * n)
            sql = (
                f"INSERT INTO {messages.name} ({', '.join(MESSAGE_COLUMNS)}) VALUES {values} "  # noqa: S608
                "ON CONFLICT DO NOTHING RETURNING device_id, seq"
            )
            self._insert_sql[n] = sql
        return sql

    def insert_messages(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> set[tuple[str, int]]:
        """Insert rows not stored yet; returns the (device_id, seq) keys this call stored."""
        if self._postgresql:
            return self.insert_pipelined(conn, rows)
        return self.insert_multirow(conn, rows)

    def insert_multirow(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> set[tuple[str, int]]:
        """Multi-row INSERT ... RETURNING statements (SQLite: as fast as executemany without RETURNING)."""
        stored: set[tuple[str, int]] = set()
        step = self.rows_per_insert
        for i in range(0, len(rows), step):
            chunk = rows[i : i + step]
            params = tuple(v for row in chunk for v in row)
            stored.update((r[0], int(r[1])) for r in conn.exec_driver_sql(self._insert(len(chunk)), params))
        return stored

    def insert_pipelined(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> set[tuple[str, int]]:
        """psycopg's pipelined ``executemany(..., returning=True)`` of a one-row INSERT ... RETURNING
        (PostgreSQL: less than half the time of multi-row VALUES). psycopg errors propagate as they are."""
        stored: set[tuple[str, int]] = set()
        cur = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cur.executemany(self._insert(1), rows, returning=True)
            while True:
                stored.update((r[0], int(r[1])) for r in cur.fetchall())
                if not cur.nextset():
                    break
        finally:
            cur.close()
        return stored

    def lower_prev(self, conn: Connection, keys: Sequence[tuple[str, int, int]]) -> None:
        """(device, seq, prev) of copies that came again: keep the smaller prev (the agent only ever drops
        entries, so a later send's prev reaches further back)."""
        if keys:
            conn.exec_driver_sql(self._lower_prev, [(prev, d, seq, prev) for d, seq, prev in keys])

    def chain_reach(self, conn: Connection, watermarks: dict[str, int]) -> dict[str, int]:
        """Per device, the highest stored sequence above its watermark whose prev is at or below it."""
        if not watermarks:
            return {}
        m = self._mark
        values = ", ".join([f"({m}, CAST({m} AS BIGINT))"] * len(watermarks))
        sql = (
            f"WITH w(device_id, wm) AS (VALUES {values}) "  # noqa: S608
            f"SELECT t.device_id, MAX(t.seq) FROM {messages.name} t JOIN w ON t.device_id = w.device_id "
            "WHERE t.seq > w.wm AND t.prev <= w.wm GROUP BY t.device_id"
        )
        params = tuple(v for item in watermarks.items() for v in item)
        return {str(r[0]): int(r[1]) for r in conn.exec_driver_sql(sql, params)}

    def set_acked(self, conn: Connection, watermarks: dict[str, int]) -> None:
        if watermarks:
            conn.exec_driver_sql(self._set_acked, [(w, d) for d, w in watermarks.items()])

    def write_devices(self, conn: Connection, updates: list[dict[str, Any]], inserts: list[dict[str, Any]]) -> None:
        if updates:
            order = self._device_order
            conn.exec_driver_sql(self._update_devices, [tuple(s[c] for c in order) for s in updates])
        if inserts:
            conn.exec_driver_sql(self._insert_devices, [tuple(s[c] for c in DEVICE_COLUMNS) for s in inserts])
