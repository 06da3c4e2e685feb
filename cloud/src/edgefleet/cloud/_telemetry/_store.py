"""Telemetry storage (SQLAlchemy 2 Core, SQLite or PostgreSQL): dedup, device state, health, retention."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from edgefleet.proto.v1 import telemetry_pb2 as pb

from ._errors import TelemetryIngestError
from ._schema import create_tables, devices, messages, rollups
from ._validate import Parsed

__all__ = ["DeviceHealth", "DeviceState", "TelemetryStore", "WriteResult", "since_epoch"]

_log = logging.getLogger(__name__)

_ERROR_SWAP_PHASES = {pb.Event.Swap.PHASE_FAILED, pb.Event.Swap.PHASE_ROLLED_BACK}


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


@dataclass(frozen=True)
class WriteResult:
    stored: int
    duplicates: int
    fresh: list[Parsed] = field(default_factory=list)  # the stored ones, in the batch's order


def since_epoch(since: float | datetime | timedelta, now: float | None = None) -> float:
    """``since`` as epoch seconds: a timedelta counts back from now; a datetime must be timezone-aware."""
    if isinstance(since, timedelta):
        return (time.time() if now is None else now) - since.total_seconds()
    if isinstance(since, datetime):
        if since.tzinfo is None:
            raise TelemetryIngestError("since must be timezone-aware")
        return since.timestamp()
    return float(since)


def _figures(msg: pb.Telemetry) -> tuple[float, float, int]:
    fps = sum(p.fps for p in msg.pipelines)
    p95 = max((p.latency.p95_ms for p in msg.pipelines), default=0.0)
    errors = sum(p.errors for p in msg.pipelines)
    return fps, p95, errors


def _is_error_event(msg: pb.Event) -> bool:
    kind = msg.WhichOneof("kind")
    if kind == "error":
        return True
    if kind == "swap":
        return msg.swap.phase in _ERROR_SWAP_PHASES
    return kind == "engine_build" and bool(msg.engine_build.error)


class TelemetryStore:
    """Reads and writes the ``telemetry_*`` tables. Thread-safe (one connection per call from the pool)."""

    def __init__(self, engine: Engine, *, create: bool = True) -> None:
        self.engine = engine
        if create:
            create_tables(engine)
        self._insert: Any = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
        if engine.dialect.name not in ("postgresql", "sqlite"):
            raise TelemetryIngestError(f"unsupported database {engine.dialect.name}: use SQLite or PostgreSQL")

    # --- writing -----------------------------------------------------------------------------------
    def write(self, batch: Sequence[Parsed], received_at: float | None = None) -> WriteResult:
        """Store a batch in one transaction; rows already stored (same device and sequence) are skipped."""
        if not batch:
            return WriteResult(0, 0)
        now = time.time() if received_at is None else received_at
        unique: dict[tuple[str, int], Parsed] = {}
        for p in batch:
            unique.setdefault((p.device_id, p.sequence), p)
        rows = [self._row(p, now) for p in unique.values()]
        stmt = self._insert(messages).on_conflict_do_nothing().returning(messages.c.device_id, messages.c.seq)
        try:
            with self.engine.begin() as conn:
                inserted = {(r[0], int(r[1])) for r in conn.execute(stmt, rows)}
                fresh = [unique[k] for k in unique if k in inserted]
                self._update_devices(conn, fresh, now)
        except SQLAlchemyError as exc:
            raise TelemetryIngestError(f"cannot store telemetry: {exc}") from exc
        return WriteResult(len(inserted), len(batch) - len(inserted), fresh)

    @staticmethod
    def _row(p: Parsed, now: float) -> dict[str, Any]:
        row: dict[str, Any] = {
            "device_id": p.device_id,
            "seq": p.sequence,
            "fleet": p.fleet,
            "kind": p.kind,
            "ts": p.time,
            "received_at": now,
            "fps": None,
            "p95_ms": None,
            "errors_total": None,
            "error_event": False,
            "payload": p.payload_json,
        }
        if p.kind == "telemetry":
            row["fps"], row["p95_ms"], row["errors_total"] = _figures(p.message)
        elif p.kind == "events":
            row["error_event"] = _is_error_event(p.message)
        return row

    def _update_devices(self, conn: Connection, fresh: Iterable[Parsed], now: float) -> None:
        latest: dict[str, list[Parsed]] = {}
        for p in fresh:
            latest.setdefault(p.device_id, []).append(p)
        known = {
            r["device_id"]: r
            for r in conn.execute(select(devices).where(devices.c.device_id.in_(list(latest)))).mappings()
        }
        for device_id, items in latest.items():
            current = known.get(device_id)
            state: dict[str, Any] = (
                dict(current)
                if current
                else {
                    "device_id": device_id,
                    "fleet": items[0].fleet,
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
                }
            )
            for p in sorted(items, key=lambda x: x.sequence):
                state["last_seen"] = now
                if p.sequence > state["last_seq"]:
                    state["last_seq"] = p.sequence
                    if p.message.header.models:
                        state["models"] = json.dumps(
                            [
                                {"pipeline": m.pipeline, "name": m.name, "version": m.version}
                                for m in p.message.header.models
                            ]
                        )
                    if p.kind == "telemetry":
                        state["fps"], state["p95_ms"], _ = _figures(p.message)
                if p.kind == "status":
                    self._apply_status(state, p.message)
            if current is None:
                conn.execute(self._insert(devices).on_conflict_do_nothing(), [state])
            else:
                conn.execute(update(devices).where(devices.c.device_id == device_id).values(**state))

    @staticmethod
    def _apply_status(state: dict[str, Any], msg: pb.Status) -> None:
        """Order statuses by (agent start, connection number): a Last Will never overrides a newer session."""
        started = msg.started_at.ToNanoseconds() / 1e9
        key = (started, int(msg.connection))
        if key < (state["status_started"], state["status_connection"]):
            return
        state["status_started"], state["status_connection"] = key
        state["online"] = msg.state == pb.Status.STATE_ONLINE
        state["status_reason"] = msg.reason[:64]
        state["status_at"] = msg.header.time.ToNanoseconds() / 1e9
        if msg.agent_version:
            state["agent_version"] = msg.agent_version[:64]

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
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
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
            )
            for r in rows
        ]

    def recent(
        self, device_id: str, since: float | datetime | timedelta, kind: str | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """Stored messages (decoded JSON) since ``since``, oldest first."""
        t0 = since_epoch(since)
        q = select(messages.c.seq, messages.c.kind, messages.c.payload).where(
            and_(messages.c.device_id == device_id, messages.c.ts >= t0)
        )
        if kind is not None:
            q = q.where(messages.c.kind == kind)
        with self.engine.connect() as conn:
            rows = conn.execute(q.order_by(messages.c.seq.desc()).limit(limit)).all()
        return [{"seq": int(r[0]), "kind": r[1], "message": json.loads(r[2])} for r in reversed(rows)]

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
