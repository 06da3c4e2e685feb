"""Telemetry storage (SQLAlchemy 2 Core, SQLite or PostgreSQL): dedup, device state, health, retention."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from google.protobuf import json_format
from sqlalchemy import Engine, and_, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from ._errors import TelemetryIngestError
from ._rejections import RejectionRow
from ._schema import create_tables, devices, messages, rejections, rollups
from ._validate import KINDS, Parsed
from ._write import Statements, advance, fold_devices, message_row, new_device

__all__ = ["DeviceHealth", "DeviceState", "TelemetryStore", "WriteResult", "since_epoch"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceHealth:
    """What a rollout health gate reads for one device over a window."""

    fps: float | None  # mean reported fps (all pipelines), None when no telemetry arrived
    p95_ms: float | None  # worst end-to-end p95 seen
    errors: int  # stream outages in the window + error / failed-swap / rollback events
    online: bool
    samples: int
    last_seen: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DeviceState:
    device_id: str
    fleet: str
    online: bool
    last_seen: float
    fps: float | None
    p95_ms: float | None
    models: list[dict[str, str]]
    agent_version: str
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> messages rejected (telemetry_rejections)
    acked_seq: int = 0  # the acknowledgement watermark


@dataclass(frozen=True)
class WriteResult:
    stored: int
    duplicates: int
    fresh: list[Parsed] = field(default_factory=list)  # the stored ones, in the batch's order
    # device id -> (fleet, watermark, highest stored) for every device with chained messages in the batch
    acks: dict[str, tuple[str, int, int]] = field(default_factory=dict)


def since_epoch(since: float | datetime | timedelta, now: float | None = None) -> float:
    """``since`` as epoch seconds: a timedelta counts back from now; a datetime must be timezone-aware."""
    if isinstance(since, timedelta):
        return (time.time() if now is None else now) - since.total_seconds()
    if isinstance(since, datetime):
        if since.tzinfo is None:
            raise TelemetryIngestError("since must be timezone-aware")
        return since.timestamp()
    return float(since)


class TelemetryStore:
    """Reads and writes the ``telemetry_*`` tables. Thread-safe (one connection per call from the pool)."""

    def __init__(self, engine: Engine, *, create: bool = True) -> None:
        self.engine = engine
        if engine.dialect.name not in ("postgresql", "sqlite"):
            raise TelemetryIngestError(f"unsupported database {engine.dialect.name}: use SQLite or PostgreSQL")
        if create:
            create_tables(engine)
        self._insert: Any = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
        self._sql = Statements(engine.dialect.name)
        # The PostgreSQL insert talks to psycopg directly: its errors are not SQLAlchemy's.
        self._db_errors: tuple[type[Exception], ...] = (SQLAlchemyError, engine.dialect.loaded_dbapi.Error)

    # --- writing -----------------------------------------------------------------------------------
    def write(
        self,
        batch: Sequence[Parsed],
        received_at: float | None = None,
        links: Sequence[tuple[str, str, int, int]] = (),
    ) -> WriteResult:
        """Store a batch in one transaction; rows already stored (same device and sequence) are skipped.

        Then each device's acknowledgement watermark follows the delivery chain (``header.prev``) of what
        is stored, this batch and earlier ones of any replica (docs/telemetry.md). ``links``: (fleet,
        device, seq, prev) of messages rejected in this batch whose header was readable: not stored, but
        the chain goes past them (or the agent would send them again forever)."""
        if not batch and not links:
            return WriteResult(0, 0)
        now = time.time() if received_at is None else received_at
        unique: dict[tuple[str, int], Parsed] = {}
        for p in batch:
            had = unique.setdefault((p.device_id, p.sequence), p)
            if p.facts.prev is not None and (had.facts.prev is None or p.facts.prev < had.facts.prev):
                unique[(p.device_id, p.sequence)] = p  # the copy reaching further back
        # (device, seq) order: replicas inserting overlapping batches take row locks in one order
        keys = sorted(unique)
        rows = [message_row(unique[k], now) for k in keys]
        try:
            with self.engine.begin() as conn:
                inserted = self._sql.insert_messages(conn, rows) if rows else set()
                fresh = [p for k, p in unique.items() if k in inserted]
                again = [
                    (k[0], k[1], p.facts.prev)
                    for k, p in unique.items()
                    if k not in inserted and p.facts.prev is not None
                ]
                self._sql.lower_prev(conn, again)
                acks = self._update_devices(conn, fresh, list(unique.values()), links, now)
        except self._db_errors as exc:
            raise TelemetryIngestError(f"cannot store telemetry: {exc}") from exc
        return WriteResult(len(fresh), len(batch) - len(fresh), fresh, acks)

    def _update_devices(
        self,
        conn: Connection,
        fresh: list[Parsed],
        every: list[Parsed],
        links: Sequence[tuple[str, str, int, int]],
        now: float,
    ) -> dict[str, tuple[str, int, int]]:
        """One SELECT of the devices concerned, then one executemany UPDATE and one INSERT for new ones,
        and the watermarks of the devices with chained messages; returns those (to acknowledge).

        On PostgreSQL the SELECT locks the rows (FOR UPDATE), in device order: replicas writing the same
        devices at once take turns instead of overwriting each other's state or deadlocking, and the one
        that goes second sees what the first stored when it follows the chain."""
        chains: dict[str, dict[int, int]] = {}
        fleets: dict[str, str] = {}
        for p in every:
            if p.facts.prev is not None:
                chains.setdefault(p.device_id, {})[p.sequence] = p.facts.prev
                fleets[p.device_id] = p.fleet
        for fleet, device, seq, prev in links:
            chains.setdefault(device, {})[seq] = prev
            fleets.setdefault(device, fleet)
        ids = sorted({p.device_id for p in fresh} | set(chains))
        if not ids:
            return {}
        q = select(devices).where(devices.c.device_id.in_(ids)).order_by(devices.c.device_id).with_for_update()
        known = {r["device_id"]: dict(r) for r in conn.execute(q).mappings()}
        missing = [i for i in ids if i not in known]
        if missing:
            # A device seen for the first time: create its row empty first (ON CONFLICT DO NOTHING), then lock
            # and fold onto whatever is there. Another replica creating it at the same moment then only
            # delays this one; before, the second insert did nothing and that replica's state was lost.
            fleets.update({p.device_id: p.fleet for p in fresh})
            self._sql.write_devices(conn, [], [new_device(i, fleets[i]) for i in missing])
            known = {r["device_id"]: dict(r) for r in conn.execute(q).mappings()}
        marks = self._watermarks(conn, chains, {d: int(known[d]["acked_seq"] or 0) for d in chains})
        updates, inserts = fold_devices(fresh, known, now)
        moved = {d: w for d, w in marks.items() if w > int(known[d]["acked_seq"] or 0)}
        highest = {d: int(known[d]["last_seq"] or 0) for d in marks}
        for state in (*updates, *inserts):
            d = state["device_id"]
            highest[d] = int(state["last_seq"] or 0)
            if d in moved:
                state["acked_seq"] = moved.pop(d)
        self._sql.write_devices(conn, updates, inserts)
        self._sql.set_acked(conn, moved)
        return {
            d: (fleets.get(d) or known[d]["fleet"], w, max(w, highest.get(d, 0))) for d, w in marks.items() if w > 0
        }

    def _watermarks(self, conn: Connection, chains: dict[str, dict[int, int]], start: dict[str, int]) -> dict[str, int]:
        """Each device's watermark moved along the chain: this batch's links in memory, then what is
        stored (any replica's rows), until neither moves it."""
        marks = {d: advance(start[d], links) for d, links in chains.items()}
        todo = dict(marks)
        while todo:
            reach = self._sql.chain_reach(conn, todo)
            todo = {}
            for d, r in reach.items():
                if r > marks[d]:
                    marks[d] = advance(r, chains[d])
                    todo[d] = marks[d]
        return marks

    # --- queries -----------------------------------------------------------------------------------
    def health(self, device_id: str, since: float | datetime | timedelta) -> DeviceHealth:
        """Figures for a rollout health gate: mean fps, worst p95, errors and online state since ``since``."""
        t0 = since_epoch(since)
        with self.engine.connect() as conn:
            dev = conn.execute(
                select(devices.c.online, devices.c.last_seen).where(devices.c.device_id == device_id)
            ).first()
            rows = conn.execute(
                select(messages.c.fps, messages.c.p95_ms, messages.c.errors_total)
                .where(and_(messages.c.device_id == device_id, messages.c.kind == "telemetry", messages.c.ts >= t0))
                .order_by(messages.c.seq)
            ).all()
            error_events = conn.execute(
                select(func.count())
                .select_from(messages)
                .where(and_(messages.c.device_id == device_id, messages.c.error_event, messages.c.ts >= t0))
            ).scalar_one()
            old = conn.execute(
                select(
                    func.sum(rollups.c.samples),
                    func.sum(rollups.c.fps_sum),
                    func.max(rollups.c.p95_max),
                    func.sum(rollups.c.errors),
                ).where(and_(rollups.c.device_id == device_id, rollups.c.bucket >= int(t0)))
            ).first()
        samples = len(rows)
        fps_sum = sum(r[0] or 0.0 for r in rows)
        p95 = max((r[1] or 0.0 for r in rows), default=None)
        errors = int(error_events) + _increase(r[2] for r in rows)
        if old is not None and old[0]:
            samples += int(old[0])
            fps_sum += float(old[1] or 0.0)
            p95 = max(p95 or 0.0, float(old[2] or 0.0))
            errors += int(old[3] or 0)
        return DeviceHealth(
            fps=fps_sum / samples if samples else None,
            p95_ms=p95,
            errors=errors,
            online=bool(dev[0]) if dev else False,
            samples=samples,
            last_seen=float(dev[1]) if dev else None,
        )

    async def health_async(self, device_id: str, since: float | datetime | timedelta) -> DeviceHealth:
        """:meth:`health` off the event loop (the controller is asyncio)."""
        import asyncio

        return await asyncio.to_thread(self.health, device_id, since)

    def device(self, device_id: str) -> DeviceState | None:
        states = self.devices(device_id=device_id)
        return states[0] if states else None

    def devices(self, *, fleet: str | None = None, device_id: str | None = None) -> list[DeviceState]:
        """Online state, latest fps/p95 and model versions per device (``edgefleet devices ls``)."""
        q = select(devices).order_by(devices.c.fleet, devices.c.device_id)
        if fleet is not None:
            q = q.where(devices.c.fleet == fleet)
        if device_id is not None:
            q = q.where(devices.c.device_id == device_id)
        rq = select(rejections.c.device_id, rejections.c.reason, rejections.c.count)
        if device_id is not None:
            rq = rq.where(rejections.c.device_id == device_id)
        elif fleet is not None:
            rq = rq.where(rejections.c.fleet == fleet)
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
            refused: dict[str, dict[str, int]] = {}
            for d, reason, n in conn.execute(rq):
                refused.setdefault(d, {})[reason] = int(n)
        return [
            DeviceState(
                r["device_id"],
                r["fleet"],
                bool(r["online"]),
                float(r["last_seen"]),
                r["fps"],
                r["p95_ms"],
                json.loads(r["models"]),
                r["agent_version"],
                refused.get(r["device_id"], {}),
                int(r["acked_seq"] or 0),
            )
            for r in rows
        ]

    def record_rejections(self, rows: Sequence[RejectionRow]) -> None:
        """Add rejection counts per device and reason (``telemetry_rejections``)."""
        if not rows:
            return
        try:
            with self.engine.begin() as conn:
                for r in sorted(rows, key=lambda x: (x.device, x.reason)):
                    stmt = self._insert(rejections).values(
                        device_id=r.device,
                        reason=r.reason,
                        fleet=r.fleet,
                        count=r.count,
                        first_at=r.last_at,
                        last_at=r.last_at,
                        last_detail=r.last_detail.replace("\0", ""),
                    )
                    conn.execute(
                        stmt.on_conflict_do_update(
                            index_elements=[rejections.c.device_id, rejections.c.reason],
                            set_={
                                "count": rejections.c.count + stmt.excluded.count,
                                "last_at": stmt.excluded.last_at,
                                "last_detail": stmt.excluded.last_detail,
                                "fleet": stmt.excluded.fleet,
                            },
                        )
                    )
        except self._db_errors as exc:
            raise TelemetryIngestError(f"cannot store rejection counts: {exc}") from exc

    def rejections(self, device_id: str) -> dict[str, dict[str, Any]]:
        """Reason -> {count, first_at, last_at, last_detail} of the device's rejected messages."""
        q = select(rejections).where(rejections.c.device_id == device_id).order_by(rejections.c.reason)
        with self.engine.connect() as conn:
            return {
                r["reason"]: {
                    "count": int(r["count"]),
                    "first_at": float(r["first_at"]),
                    "last_at": float(r["last_at"]),
                    "last_detail": r["last_detail"],
                }
                for r in conn.execute(q).mappings()
            }

    def recent(
        self,
        device_id: str,
        since: float | datetime | timedelta,
        kind: str | None = None,
        limit: int = 1000,
        *,
        first: bool = False,
    ) -> list[dict[str, Any]]:
        """Stored messages (decoded JSON; binary payloads rendered in protobuf's JSON mapping) since ``since``,
        oldest first: the newest ``limit`` of them, or with ``first`` the oldest ``limit``."""
        t0 = since_epoch(since)
        q = select(messages.c.seq, messages.c.kind, messages.c.payload, messages.c.payload_pb).where(
            and_(messages.c.device_id == device_id, messages.c.ts >= t0)
        )
        if kind is not None:
            q = q.where(messages.c.kind == kind)
        order = messages.c.seq.asc() if first else messages.c.seq.desc()
        with self.engine.connect() as conn:
            rows = list(conn.execute(q.order_by(order).limit(limit)).all())
        if not first:
            rows.reverse()
        return [{"seq": int(r[0]), "kind": r[1], "message": _decode(r[1], r[2], r[3])} for r in rows]

    def sequences(self, device_id: str, kind: str | None = None) -> list[int]:
        """Stored sequence numbers of a device in arrival-independent order (tests, audits)."""
        q = select(messages.c.seq).where(messages.c.device_id == device_id)
        if kind is not None:
            q = q.where(messages.c.kind == kind)
        with self.engine.connect() as conn:
            return [int(r[0]) for r in conn.execute(q.order_by(messages.c.seq))]

    # --- retention ---------------------------------------------------------------------------------
    def compact(
        self,
        *,
        raw_retention_s: float = 86_400.0,
        bucket_s: int = 60,
        rollup_retention_s: float = 30 * 86_400.0,
        now: float | None = None,
        chunk: int = 50_000,
    ) -> int:
        """Fold telemetry older than ``raw_retention_s`` into ``bucket_s`` rollups and delete old raw rows.

        Deduplication covers the raw window only: a message older than it that arrives again is folded in
        again (an agent offline for longer than the raw retention replays into rollups). Returns raw rows
        removed.
        """
        t_now = time.time() if now is None else now
        cutoff = t_now - raw_retention_s
        removed = 0
        try:
            with self.engine.begin() as conn:
                rows = conn.execute(
                    select(
                        messages.c.device_id,
                        messages.c.seq,
                        messages.c.ts,
                        messages.c.fps,
                        messages.c.p95_ms,
                        messages.c.errors_total,
                    )
                    .where(and_(messages.c.kind == "telemetry", messages.c.ts < cutoff))
                    .order_by(messages.c.device_id, messages.c.seq)
                    .limit(chunk)
                ).all()
                buckets: dict[tuple[str, int], list[Any]] = {}
                for r in rows:
                    key = (r[0], int(r[2] // bucket_s) * bucket_s)
                    b = buckets.setdefault(key, [0, 0.0, 0.0, None, None])
                    b[0] += 1
                    b[1] += r[3] or 0.0
                    b[2] = max(b[2], r[4] or 0.0)
                    if r[5] is not None:
                        b[3] = r[5] if b[3] is None else min(b[3], r[5])
                        b[4] = r[5] if b[4] is None else max(b[4], r[5])
                for (device_id, bucket), (n, fps_sum, p95, lo, hi) in buckets.items():
                    errs = int((hi or 0) - (lo or 0))
                    self._merge_rollup(conn, device_id, bucket, bucket_s, n, fps_sum, p95, errs)
                for device_id, seq in ((r[0], r[1]) for r in rows):
                    conn.execute(delete(messages).where(and_(messages.c.device_id == device_id, messages.c.seq == seq)))
                removed += len(rows)
                res = conn.execute(delete(messages).where(and_(messages.c.kind != "telemetry", messages.c.ts < cutoff)))
                removed += int(res.rowcount or 0)
                conn.execute(delete(rollups).where(rollups.c.bucket < int(t_now - rollup_retention_s)))
        except SQLAlchemyError as exc:
            raise TelemetryIngestError(f"telemetry retention failed: {exc}") from exc
        if removed:
            _log.info("telemetry retention: %d raw rows folded or removed", removed)
        return removed

    def _merge_rollup(
        self,
        conn: Connection,
        device_id: str,
        bucket: int,
        bucket_s: int,
        n: int,
        fps_sum: float,
        p95: float,
        errs: int,
    ) -> None:
        stmt = self._insert(rollups).values(
            device_id=device_id,
            bucket=bucket,
            bucket_s=bucket_s,
            samples=n,
            fps_sum=fps_sum,
            p95_max=p95,
            errors=errs,
        )
        excluded = stmt.excluded
        stmt = stmt.on_conflict_do_update(
            index_elements=[rollups.c.device_id, rollups.c.bucket],
            set_={
                "samples": rollups.c.samples + excluded.samples,
                "fps_sum": rollups.c.fps_sum + excluded.fps_sum,
                "p95_max": func.max(rollups.c.p95_max, excluded.p95_max)
                if self.engine.dialect.name == "sqlite"
                else func.greatest(rollups.c.p95_max, excluded.p95_max),
                "errors": rollups.c.errors + excluded.errors,
            },
        )
        conn.execute(stmt)


def _decode(kind: str, text: str, blob: bytes | None) -> Any:
    if blob is None:
        return json.loads(text)
    msg = KINDS[kind]()
    msg.ParseFromString(blob)
    return json_format.MessageToDict(msg)


def _increase(values: Iterable[int | None]) -> int:
    """Total increase of a cumulative counter, counting a drop (agent restart) as a reset to zero."""
    total = 0
    prev: int | None = None
    for v in values:
        if v is None:
            continue
        if prev is not None:
            total += v - prev if v >= prev else v
        prev = v
    return total
