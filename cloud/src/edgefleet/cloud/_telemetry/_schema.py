"""The telemetry tables (``telemetry_*``), kept apart from the controller's own schema.

``telemetry_metadata`` is a separate ``MetaData``: the controller's migrations can include it, or call
:func:`create_tables` once at start-up (idempotent).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = ["create_tables", "devices", "messages", "rollups", "telemetry_metadata"]

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
    Column("payload", Text, nullable=False),
    Index("ix_telemetry_messages_device_kind_ts", "device_id", "kind", "ts"),
    Index("ix_telemetry_messages_received", "received_at"),
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


def create_tables(engine: Engine) -> None:
    """Create the ``telemetry_*`` tables where missing (nothing else is touched)."""
    telemetry_metadata.create_all(engine, checkfirst=True)
