"""Controller state: SQLAlchemy 2 Core tables, engine set-up and versioned migrations.

SQLite (WAL) is the default; PostgreSQL (psycopg 3) lets several controller replicas share one database.
Migrations are numbered functions applied in order inside one transaction each; ``schema_version``
records the highest applied. On PostgreSQL an advisory lock serialises replicas that start together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ._errors import DatabaseError

__all__ = ["MIGRATIONS", "create_engine", "metadata", "migrate", "schema_version", "tables"]

_log = logging.getLogger(__name__)

metadata = sa.MetaData()

models = sa.Table(
    "models",
    metadata,
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(64), nullable=False),
    sa.Column("version", sa.String(128), nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("task", sa.String(32), nullable=False),
    sa.Column("description", sa.Text, nullable=False, default=""),
    sa.Column("signed_by", sa.String(64), nullable=False, default=""),
    sa.Column("manifest", sa.JSON, nullable=False),
    sa.Column("pushed_at", sa.Float, nullable=False),
    sa.Column("portable", sa.Boolean, nullable=False, default=True),  # v10
    sa.UniqueConstraint("name", "version", name="uq_models_name_version"),
)

devices = sa.Table(
    "devices",
    metadata,
    sa.Column("device_id", sa.String(64), primary_key=True),
    sa.Column("reported_labels", sa.JSON, nullable=False),
    sa.Column("label_overrides", sa.JSON, nullable=False),  # value None: removed by an operator
    sa.Column("capabilities", sa.JSON, nullable=False),
    sa.Column("pipelines", sa.JSON, nullable=False),
    sa.Column("health", sa.JSON, nullable=False),
    sa.Column("health_at", sa.Float, nullable=False, default=0.0),
    sa.Column("online", sa.Boolean, nullable=False, default=False),
    sa.Column("connection", sa.String(128), nullable=False, default=""),  # replica:session holding it
    sa.Column("first_seen", sa.Float, nullable=False),
    sa.Column("last_seen", sa.Float, nullable=False),
    sa.Column("last_event", sa.Text, nullable=False, default=""),
    sa.Column("connected_at", sa.Float, nullable=False, default=0.0),  # when its current stream opened (v6)
)

# What each device should serve, per model name, and the command that gets it there.
desired = sa.Table(
    "desired",
    metadata,
    sa.Column("device_id", sa.String(64), primary_key=True),
    sa.Column("model_name", sa.String(64), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),  # apply | rollback
    sa.Column("sha256", sa.String(64), nullable=False, default=""),
    sa.Column("ref", sa.String(200), nullable=False, default=""),
    sa.Column("command_id", sa.String(128), nullable=False, unique=True),
    sa.Column("rollout_id", sa.String(32), nullable=False, default=""),
    sa.Column("health_window_s", sa.Float, nullable=False, default=0.0),
    sa.Column("state", sa.String(16), nullable=False),  # pending | applying | applied | failed
    sa.Column("message", sa.Text, nullable=False, default=""),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("done_at", sa.Float, nullable=False, default=0.0),
    # v6: the controller re-sends a command a device does not serve, under a new id per attempt
    sa.Column("attempt", sa.Integer, nullable=False, default=1),
    sa.Column("not_before", sa.Float, nullable=False, default=0.0),  # backoff: not sent before this time
    sa.Column("last_good_at", sa.Float, nullable=False, default=0.0),  # the device reported it last-good
)

rollouts = sa.Table(
    "rollouts",
    metadata,
    sa.Column("rollout_id", sa.String(32), primary_key=True),
    sa.Column("request_id", sa.String(64), nullable=True, unique=True),
    sa.Column("model_name", sa.String(64), nullable=False),
    sa.Column("model_ref", sa.String(200), nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("selector", sa.JSON, nullable=False),
    sa.Column("waves", sa.JSON, nullable=False),
    sa.Column("params", sa.JSON, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("current_wave", sa.Integer, nullable=False, default=0),
    sa.Column("message", sa.Text, nullable=False, default=""),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("lease_owner", sa.String(128), nullable=False, default=""),
    sa.Column("lease_until", sa.Float, nullable=False, default=0.0),
)

rollout_devices = sa.Table(
    "rollout_devices",
    metadata,
    sa.Column("rollout_id", sa.String(32), primary_key=True),
    sa.Column("device_id", sa.String(64), primary_key=True),
    sa.Column("wave", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("previous_ref", sa.String(200), nullable=False, default=""),
    sa.Column("previous_sha", sa.String(64), nullable=False, default=""),
    sa.Column("command_id", sa.String(128), nullable=False, default=""),
    sa.Column("swapped_at", sa.Float, nullable=False, default=0.0),
    sa.Column("message", sa.Text, nullable=False, default=""),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("watch_since", sa.Float, nullable=False, default=0.0),  # v6: its health window runs from here
    sa.Column("variant", sa.String(64), nullable=False, default=""),  # v10: the artifact variant picked
    sa.Column("variant_sha", sa.String(64), nullable=False, default=""),
)

# v10: pipeline specs (immutable versions), device sealing keys, sealed camera secrets (issue 21)
pipeline_specs = sa.Table(
    "pipeline_specs",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("version", sa.BigInteger, primary_key=True),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("description", sa.Text, nullable=False, default=""),
    sa.Column("document", sa.Text, nullable=False),  # canonical JSON; never holds a credential
    sa.Column("pushed_at", sa.Float, nullable=False),
)

device_keys = sa.Table(
    "device_keys",
    metadata,
    sa.Column("device_id", sa.String(64), primary_key=True),
    sa.Column("public_key_pem", sa.Text, nullable=False),  # of the mTLS certificate it last connected with
    sa.Column("updated_at", sa.Float, nullable=False),
)

sealed_secrets = sa.Table(
    "sealed_secrets",
    metadata,
    sa.Column("device_id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("sealed", sa.LargeBinary, nullable=False),  # ciphertext only the device can open
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

# v10: per-target artifacts of a model version (the ``models`` row is the portable one, or, with
# ``portable`` false, the first targeted one)
model_variants = sa.Table(
    "model_variants",
    metadata,
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(64), nullable=False),
    sa.Column("version", sa.String(128), nullable=False),
    sa.Column("variant", sa.String(64), nullable=False),
    sa.Column("target", sa.JSON, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("pushed_at", sa.Float, nullable=False),
    sa.UniqueConstraint("name", "version", "variant", name="uq_model_variants"),
)

_V10_TABLES = [pipeline_specs, device_keys, sealed_secrets, model_variants]
# v10: columns for variants: (table, column, SQL type, default)
_V10_COLUMNS = [
    ("models", "portable", "BOOLEAN", "TRUE"),
    ("rollout_devices", "variant", "VARCHAR(64)", "''"),
    ("rollout_devices", "variant_sha", "VARCHAR(64)", "''"),
]

schema_version_table = sa.Table(
    "schema_version",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("applied_at", sa.Float, nullable=False),
)

tables = {t.name: t for t in (models, devices, desired, rollouts, rollout_devices, *_V10_TABLES, schema_version_table)}

_V1_TABLES = [models, devices, desired, rollouts, rollout_devices]


def _v1(conn: Connection) -> None:
    metadata.create_all(conn, tables=_V1_TABLES)


def _v2(conn: Connection) -> None:
    # Plain DDL: an sa.Index object would attach itself to the shared MetaData (and so to _v1).
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_desired_state ON desired (state)"))
    conn.execute(sa.text("CREATE INDEX IF NOT EXISTS ix_rollouts_state ON rollouts (state)"))


def _v3(conn: Connection) -> None:
    # The telemetry tables have their own MetaData (edgefleet.cloud._telemetry); creating them here, under
    # the migration lock, means every controller database can be read by `edgefleet telemetry show` and
    # replicas never race to create them. Later changes to them get migrations of their own.
    from ._telemetry._schema import telemetry_metadata

    telemetry_metadata.create_all(conn, checkfirst=True)


def _upgrade_telemetry(conn: Connection) -> None:
    # v4: binary protobuf telemetry is stored as received (telemetry_messages.payload_pb), no longer
    # converted to JSON on ingest. v5: ix_telemetry_messages_received dropped (no query used it). Both are
    # what upgrade_tables does; a database created by this release already has the result. v6: the
    # delivery chain and watermark (telemetry_messages.prev, telemetry_devices.acked_seq) and the
    # rejection counts (telemetry_rejections).
    from ._telemetry._schema import upgrade_tables

    upgrade_tables(conn)


# v7: columns of the convergence rules (docs/grpc-api.md, "Rollouts"): (table, column, SQL type, default)
_V7_COLUMNS = [
    ("devices", "connected_at", "DOUBLE PRECISION", "0"),
    ("desired", "attempt", "INTEGER", "1"),
    ("desired", "not_before", "DOUBLE PRECISION", "0"),
    ("desired", "last_good_at", "DOUBLE PRECISION", "0"),
    ("rollout_devices", "watch_since", "DOUBLE PRECISION", "0"),
]


def _v7(conn: Connection) -> None:
    # A database created by this release has them already (_v1 creates the tables as defined above).
    inspector = sa.inspect(conn)
    for table, column, sql_type, default in _V7_COLUMNS:
        if column not in {c["name"] for c in inspector.get_columns(table)}:
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type} NOT NULL DEFAULT {default}"))


def _v10(conn: Connection) -> None:
    metadata.create_all(conn, tables=_V10_TABLES, checkfirst=True)
    inspector = sa.inspect(conn)
    for table, column, sql_type, default in _V10_COLUMNS:
        if column not in {c["name"] for c in inspector.get_columns(table)}:
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type} NOT NULL DEFAULT {default}"))


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "initial schema", _v1),
    (2, "indexes on desired.state and rollouts.state", _v2),
    (3, "telemetry tables (telemetry_devices, telemetry_messages, telemetry_rollups)", _v3),
    (4, "telemetry_messages.payload_pb (binary protobuf payloads stored as received)", _upgrade_telemetry),
    (5, "drop ix_telemetry_messages_received (no query uses it; every insert paid for it)", _upgrade_telemetry),
    (
        6,
        "telemetry acknowledgements (telemetry_messages.prev, telemetry_devices.acked_seq), telemetry_rejections",
        _upgrade_telemetry,
    ),
    (7, "convergence: devices.connected_at, desired.attempt/not_before/last_good_at, rollout_devices.watch_since", _v7),
    (10, "pipeline specs, device sealing keys, sealed camera secrets, model variants per target", _v10),
]


def database_url(url: str) -> str:
    """Accept ``sqlite:///path`` and ``postgresql://...`` and pick the drivers edgefleet pins."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url in ("sqlite://", "sqlite:///", "sqlite:///:memory:"):
        raise DatabaseError("an in-memory SQLite database keeps nothing; give a file: sqlite:///path/controller.db")
    if url.startswith(("sqlite://", "postgresql+psycopg://")):
        return url
    if "://" not in url:  # a bare path
        raise DatabaseError(f"the database is a URL: sqlite:///{url} for this file, or postgresql://...")
    raise DatabaseError(f"unsupported database URL {url.split('://', 1)[0]}://… (use sqlite:/// or postgresql://)")


def create_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite files get WAL, a busy timeout and foreign keys."""
    real = database_url(url)
    kwargs: dict[str, Any] = {}
    if real.startswith("sqlite"):
        path = real.split("sqlite:///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
    else:
        kwargs["pool_pre_ping"] = True
        kwargs["pool_size"] = 8
        kwargs["connect_args"] = {"connect_timeout": 10}
    engine = sa.create_engine(real, **kwargs)
    if real.startswith("sqlite"):

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

    return engine


def schema_version(conn: Connection) -> int:
    if not sa.inspect(conn).has_table("schema_version"):
        return 0
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(schema_version_table.c.version), 0))).scalar_one())


def migrate(engine: Engine, now: Callable[[], float]) -> int:
    """Apply every migration not applied yet; returns the schema version. Safe for concurrent replicas.
    A database a newer release has migrated further is refused: this build would misread what that
    release writes (e.g. telemetry stored as protobuf since version 4)."""
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(7461023)"))
            metadata.create_all(conn, tables=[schema_version_table])
            current = schema_version(conn)
            known = MIGRATIONS[-1][0]
            if current > known:
                raise DatabaseError(
                    f"the database is at schema version {current}, newer than this controller knows ({known}): "
                    "a newer release has migrated it; run that release (every replica on it) or newer"
                )
            for version, title, fn in MIGRATIONS:
                if version <= current:
                    continue
                _log.info("database migration %d: %s", version, title)
                fn(conn)
                conn.execute(sa.insert(schema_version_table).values(version=version, applied_at=now()))
                current = version
            return current
    except sa.exc.SQLAlchemyError as exc:
        raise DatabaseError(f"cannot open or migrate the database: {_short(exc)}") from None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
