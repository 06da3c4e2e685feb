"""The telemetry tables (``telemetry_*``), kept apart from the controller's own schema.

``telemetry_metadata`` is a separate ``MetaData``: the controller's migrations can include it, or call
:func:`create_tables` once at start-up (idempotent). Columns added after a table first shipped are added
to existing databases by :func:`upgrade_tables` (the controller's migration 4 calls it).
"""

from __future__ import annotations

import logging

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Engine,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    text,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

__all__ = [
    "create_tables",
    "devices",
    "messages",
    "rejections",
    "rollups",
    "telemetry_metadata",
    "upgrade_tables",
]

_log = logging.getLogger(__name__)

telemetry_metadata = MetaData()

# One row per device: online state from status messages / Last Will, latest figures.
devices = Table(
    "telemetry_devices",
    telemetry_metadata,
    Column("device_id", String(128), primary_key=True),
    Column("fleet", String(128), nullable=False),
    Column("online", Boolean, nullable=False, default=False),
    Column("status_started", Float, nullable=False, default=0.0),  # agent process start of the status applied
    Column("status_connection", Integer, nullable=False, default=0),  # its connection number
    Column("status_reason", String(64), nullable=False, default=""),
    Column("status_at", Float, nullable=False, default=0.0),
    Column("last_seen", Float, nullable=False, default=0.0),  # receive time of the newest message
    Column("last_seq", BigInteger, nullable=False, default=0),
    Column("agent_version", String(64), nullable=False, default=""),
    Column("models", Text, nullable=False, default="[]"),  # JSON list of {pipeline, name, version}
    Column("fps", Float, nullable=True),
    Column("p95_ms", Float, nullable=True),
    # the acknowledgement watermark (since v6): every message up to it is stored or was given up
    Column("acked_seq", BigInteger, nullable=True),
)

# Raw messages, deduplicated on (device_id, seq); telemetry rows carry the figures health gates read.
messages = Table(
    "telemetry_messages",
    telemetry_metadata,
    Column("device_id", String(128), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("fleet", String(128), nullable=False),
    Column("kind", String(16), nullable=False),  # status | telemetry | events
    Column("ts", Float, nullable=False),  # agent clock
    Column("received_at", Float, nullable=False),
    Column("fps", Float, nullable=True),  # telemetry: sum over pipelines
    Column("p95_ms", Float, nullable=True),  # telemetry: worst pipeline end-to-end p95
    Column("errors_total", BigInteger, nullable=True),  # telemetry: cumulative errors (stream outages)
    Column("error_event", Boolean, nullable=False, default=False),  # events: error, failed swap, rollback
    Column("payload", Text, nullable=False),  # JSON payloads as received; "" when payload_pb holds it
    Column("payload_pb", LargeBinary, nullable=True),  # binary protobuf payloads as received (since v4)
    Column("prev", BigInteger, nullable=True),  # header.prev, the smallest seen (since v6); NULL: not chained
    Index("ix_telemetry_messages_device_kind_ts", "device_id", "kind", "ts"),
)

# Downsampled telemetry: one row per device per bucket once raw rows pass their retention.
rollups = Table(
    "telemetry_rollups",
    telemetry_metadata,
    Column("device_id", String(128), primary_key=True),
    Column("bucket", Integer, primary_key=True, autoincrement=False),  # bucket start, epoch seconds
    Column("bucket_s", Integer, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("fps_sum", Float, nullable=False),
    Column("p95_max", Float, nullable=False),
    Column("errors", BigInteger, nullable=False),
)


# Rejected messages per device and reason (since v6): what `telemetry show` and `devices show` report.
rejections = Table(
    "telemetry_rejections",
    telemetry_metadata,
    Column("device_id", String(128), primary_key=True),  # the topic's device level
    Column("reason", String(32), primary_key=True),
    Column("fleet", String(128), nullable=False),
    Column("count", BigInteger, nullable=False),
    Column("first_at", Float, nullable=False),
    Column("last_at", Float, nullable=False),
    Column("last_detail", String(300), nullable=False),
)

# Columns added to tables that already shipped; each is nullable.
_ADDED: tuple[Column[object], ...] = (messages.c.payload_pb, messages.c.prev, devices.c.acked_seq)


def _missing(conn: Connection) -> list[Column[object]]:
    insp = inspect(conn)
    return [
        column
        for column in _ADDED
        if insp.has_table(column.table.name)
        and column.name not in {c["name"] for c in insp.get_columns(column.table.name)}
    ]


# Indexes that shipped and are no longer used by any query (each costs every insert).
_DROPPED_INDEXES = {"telemetry_messages": ("ix_telemetry_messages_received",)}


def _stale_indexes(conn: Connection) -> list[str]:
    insp = inspect(conn)
    return [
        name
        for table, names in _DROPPED_INDEXES.items()
        if insp.has_table(table)
        for name in names
        if name in {i["name"] for i in insp.get_indexes(table)}
    ]


def upgrade_tables(conn: Connection) -> list[str]:
    """Create tables and add the columns a database made by an older release lacks, and drop indexes no
    query uses; returns what changed (idempotent)."""
    added: list[str] = []
    insp = inspect(conn)
    for new in telemetry_metadata.sorted_tables:
        if not insp.has_table(new.name):
            new.create(conn)
            added.append(new.name)
    for name in _stale_indexes(conn):
        conn.execute(text(f"DROP INDEX IF EXISTS {name}"))
        added.append(f"-{name}")
    for column in _missing(conn):
        table = column.table.name
        kind = column.type.compile(dialect=conn.dialect)
        exists = " IF NOT EXISTS" if conn.dialect.name == "postgresql" else ""
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN{exists} {column.name} {kind}"))
        added.append(f"{table}.{column.name}")
    return added


def create_tables(engine: Engine) -> None:
    """Create the ``telemetry_*`` tables where missing and add missing columns (nothing else is touched)."""
    telemetry_metadata.create_all(engine, checkfirst=True)
    try:
        with engine.begin() as conn:
            added = upgrade_tables(conn)
    except SQLAlchemyError:
        with engine.connect() as conn:  # another process may have added it first
            if _missing(conn) or _stale_indexes(conn):
                raise
        return
    if added:
        _log.info("telemetry tables upgraded: %s", ", ".join(added))
