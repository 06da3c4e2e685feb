"""The telemetry store on a real PostgreSQL (127.0.0.1:5432, throwaway database) and the CLI summary."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from edgefleet.cloud._telemetry import TelemetryStore, parse_message
from edgefleet.edge._telemetry._messages import Encoding, Identity, encode, stamp
from edgefleet.proto.v1 import telemetry_pb2 as pb

pytestmark = pytest.mark.integration

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def pg_url() -> Iterator[str]:
    name = f"edgefleet_telemetry_{uuid.uuid4().hex[:10]}"
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        pytest.skip(f"PostgreSQL not reachable at 127.0.0.1:5432: {exc.__class__.__name__}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def telem(seq: int, fps: float, now: float) -> object:
    m = pb.Telemetry()
    p = m.pipelines.add(name="default", fps=fps, errors=seq)
    p.latency.p95_ms = fps / 2
    stamp(m, Identity("pg", "cam-pg"), seq, [], now=now)
    m.header.models.add(pipeline="default", name="det", version="1.2.0")
    return parse_message("edgefleet/v1/pg/cam-pg/telemetry", encode(m, Encoding.JSON), None, 65536)


def test_postgres_store_dedup_health_retention_and_cli(pg_url: str) -> None:
    engine = create_engine(pg_url)
    try:
        store = TelemetryStore(engine)
        now = time.time()
        big = 2**40 + 5  # sequence numbers are 64-bit (a fresh spool starts at the clock in microseconds)
        r = store.write([telem(big, 20.0, now - 3 * 86400), telem(big + 1, 30.0, now), telem(big + 1, 30.0, now)])
        assert (r.stored, r.duplicates) == (2, 1)
        assert store.write([telem(big + 1, 30.0, now)]).duplicates == 1
        h = store.health("cam-pg", timedelta(hours=1))
        assert (h.samples, h.fps, h.p95_ms) == (1, 30.0, 15.0)
        assert store.compact(raw_retention_s=86400, now=now) == 1
        assert store.compact(raw_retention_s=86400, now=now) == 0
        week = store.health("cam-pg", timedelta(days=7))
        assert week.samples == 2 and week.fps == pytest.approx(25.0)
        assert store.devices()[0].models == [{"pipeline": "default", "name": "det", "version": "1.2.0"}]

        from typer.testing import CliRunner

        from edgefleet.sdk._cli._app import build

        result = CliRunner().invoke(
            build().app, ["telemetry", "show", "cam-pg", "--since", "7d", "--db", pg_url, "--json"]
        )
        assert result.exit_code == 0, result.output
        out = json.loads(result.output)
        assert out["health"]["samples"] == 2 and out["models"][0]["version"] == "1.2.0"
        missing = CliRunner().invoke(build().app, ["telemetry", "show", "nobody", "--db", pg_url])
        assert missing.exit_code == 1 and "no telemetry" in missing.output
    finally:
        engine.dispose()
