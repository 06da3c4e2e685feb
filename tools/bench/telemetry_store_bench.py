#!/usr/bin/env python3
"""Ways to write one telemetry ingest batch, per row (prints JSON; --out writes it too).

    .venv/bin/python tools/bench/telemetry_store_bench.py [--batches 20] [--batch 500] [--devices 100]
        [--db sqlite | postgresql://postgres@127.0.0.1:5432/] [--out FILE]

Message rows (1 KB JSON telemetry, all new): SQLAlchemy Core ``insert().on_conflict_do_nothing()
.returning()`` executemany (what the store did before) against driver-level multi-row
``INSERT ... ON CONFLICT DO NOTHING RETURNING`` (what the store uses on SQLite), psycopg's pipelined
executemany with RETURNING (what it uses on PostgreSQL), and a driver ``executemany`` without RETURNING
(a floor: it cannot tell which rows were new). Device rows: one UPDATE per device (before)
against one executemany UPDATE (now). Each variant writes into a fresh table set in one transaction per
batch; PostgreSQL runs in a throwaway database.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "bench"))

from _harness import database_url, emit, load, machine  # noqa: E402
from telemetry_bench import telemetry_template  # noqa: E402

from edgefleet.cloud._db import create_engine  # noqa: E402
from edgefleet.cloud._telemetry._schema import create_tables, devices, messages  # noqa: E402
from edgefleet.cloud._telemetry._validate import Parsed, parse_message  # noqa: E402
from edgefleet.cloud._telemetry._write import MESSAGE_COLUMNS, Statements, fold_devices, message_row  # noqa: E402
from edgefleet.edge._telemetry._messages import Encoding, Identity, encode, stamp, topic  # noqa: E402
from edgefleet.proto.v1 import telemetry_pb2 as pb  # noqa: E402


def batches(n: int, size: int, device_count: int) -> list[list[Parsed]]:
    template = telemetry_template()
    out: list[list[Parsed]] = []
    for b in range(n):
        batch = []
        for k in range(size):
            ident = Identity("bench", f"dev{k % device_count:05d}")
            m = pb.Telemetry()
            m.CopyFrom(template)
            stamp(m, ident, b * size + k + 1, [])
            batch.append(parse_message(topic(ident, "telemetry"), encode(m, Encoding.JSON), None, 1 << 18))
        out.append(batch)
    return out


def core_insert(conn: Connection, rows: list[tuple[Any, ...]]) -> set[tuple[str, int]]:
    ins = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = ins(messages).on_conflict_do_nothing().returning(messages.c.device_id, messages.c.seq)
    params = [dict(zip(MESSAGE_COLUMNS, r, strict=True)) for r in rows]
    return {(r[0], int(r[1])) for r in conn.execute(stmt, params)}


def driver_executemany(conn: Connection, rows: list[tuple[Any, ...]]) -> set[tuple[str, int]]:
    mark = "?" if conn.dialect.name == "sqlite" else "%s"
    sql = (
        f"INSERT INTO {messages.name} ({', '.join(MESSAGE_COLUMNS)}) "
        f"VALUES ({', '.join([mark] * len(MESSAGE_COLUMNS))}) ON CONFLICT DO NOTHING"
    )
    conn.exec_driver_sql(sql, rows)
    return {(r[0], r[1]) for r in rows}  # what it would have to assume


def per_device_update(conn: Connection, fresh: list[Parsed], now: float, _sql: Statements) -> None:
    known = {r["device_id"]: dict(r) for r in conn.execute(devices.select()).mappings()}
    updates, _ = fold_devices(fresh, known, now)
    for state in updates:
        conn.execute(update(devices).where(devices.c.device_id == state["device_id"]).values(**state))


def executemany_update(conn: Connection, fresh: list[Parsed], now: float, sql: Statements) -> None:
    known = {r["device_id"]: dict(r) for r in conn.execute(devices.select()).mappings()}
    updates, _ = fold_devices(fresh, known, now)
    sql.write_devices(conn, updates, [])


def reset(engine: Engine, device_count: int) -> None:
    with engine.begin() as conn:
        conn.execute(messages.delete())
        conn.execute(devices.delete())
        sql = Statements(engine.dialect.name)
        fresh = batches(1, device_count, device_count)[0]
        _, inserts = fold_devices(fresh, {}, 0.0)
        sql.write_devices(conn, [], inserts)


def measure(engine: Engine, data: list[list[Parsed]], step: Callable[[Connection, list[Parsed]], None]) -> float:
    """Microseconds per row: one transaction per batch."""
    rows = sum(len(b) for b in data)
    t0 = time.perf_counter()
    for batch in data:
        with engine.begin() as conn:
            step(conn, batch)
    return round((time.perf_counter() - t0) / rows * 1e6, 1)


@contextmanager
def database(kind: str) -> Iterator[Engine]:
    """SQLite (WAL, as the controller opens it) in a temporary file, or a throwaway PostgreSQL database."""
    with tempfile.TemporaryDirectory() as tmp, database_url(kind, Path(tmp) / "store.db") as url:
        engine = create_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--devices", type=int, default=100)
    ap.add_argument("--db", default="sqlite")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    data = batches(args.batches, args.batch, args.devices)
    result: dict[str, Any] = {
        "command": shlex.join([".venv/bin/python", "tools/bench/telemetry_store_bench.py", *sys.argv[1:]]),
        "machine": machine(),
        "load_at_start": load(),
        "rows": args.batches * args.batch,
        "batch": args.batch,
        "devices": args.devices,
    }
    with database(args.db) as engine:
        create_tables(engine)
        sql = Statements(engine.dialect.name)
        result["db"] = engine.dialect.name
        now = time.time()
        inserts: dict[str, Callable[[Connection, list[tuple[Any, ...]]], object]] = {
            "core_executemany_returning": core_insert,
            "driver_multirow_returning": sql.insert_multirow,
            "driver_executemany_no_returning": driver_executemany,
        }
        if engine.dialect.name == "postgresql":
            inserts["psycopg_executemany_returning"] = sql.insert_pipelined
        figures: dict[str, float] = {}
        for name, insert in inserts.items():
            reset(engine, args.devices)

            def step(conn: Connection, batch: list[Parsed], insert: Any = insert) -> None:
                insert(conn, [message_row(p, now) for p in batch])

            figures[name] = measure(engine, data, step)
        result["insert_us_per_row"] = figures
        device_steps = {"update_per_device": per_device_update, "update_executemany": executemany_update}
        figures = {}
        for name, fn in device_steps.items():
            reset(engine, args.devices)

            def dstep(conn: Connection, batch: list[Parsed], fn: Any = fn) -> None:
                fn(conn, batch, now, sql)

            figures[name] = measure(engine, data, dstep)
        result["device_state_us_per_message"] = figures
    emit(result, args.out)


if __name__ == "__main__":
    main()
