"""The telemetry store on a real PostgreSQL (127.0.0.1:5432, throwaway database) and the CLI summary."""

from __future__ import annotations

import json
import threading
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


def test_postgres_stores_binary_payloads_and_status_text_with_nul(pg_url: str) -> None:
    engine = create_engine(pg_url)
    try:
        store = TelemetryStore(engine)
        status = pb.Status(state=pb.Status.STATE_ONLINE, reason="conn\0ected", agent_version="1.\x002", connection=3)
        stamp(status, Identity("pg", "cam-pg"), 1, [], now=time.time())
        body = encode(status, Encoding.PROTOBUF)
        parsed = parse_message("edgefleet/v1/pg/cam-pg/status", body, "application/x-protobuf", 4096)
        assert store.write([parsed, parsed]).stored == 1  # PostgreSQL text holds no NUL: stripped in state
        state = store.device("cam-pg")
        assert state is not None and state.online and state.agent_version == "1.2"
        (row,) = store.recent("cam-pg", timedelta(hours=1))
        assert row["message"]["reason"] == "conn\0ected"  # the payload itself is kept as received
        with engine.connect() as c:
            assert c.execute(text("SELECT payload_pb FROM telemetry_messages")).scalar_one() == body
    finally:
        engine.dispose()


def test_postgres_replicas_writing_the_same_devices_take_turns(pg_url: str) -> None:
    """Two writers, the same 40 devices in opposite orders: device rows are locked in one order, so neither
    deadlocks nor loses the other's state."""
    engine = create_engine(pg_url)
    try:
        store = TelemetryStore(engine)
        now = time.time()
        devices = [f"cam-{i:02d}" for i in range(40)]

        def batch(seq: int, order: list[str]) -> list[object]:
            out = []
            for d in order:
                m = pb.Telemetry()
                m.pipelines.add(name="default", fps=float(seq))
                stamp(m, Identity("pg", d), seq, [], now=now)
                out.append(parse_message(f"edgefleet/v1/pg/{d}/telemetry", encode(m, Encoding.JSON), None, 4096))
            return out

        work = {0: [batch(s, devices) for s in range(1, 41, 2)], 1: [batch(s, devices[::-1]) for s in range(2, 41, 2)]}
        errors: list[BaseException] = []

        def writer(k: int) -> None:
            for b in work[k]:
                try:
                    store.write(b)  # type: ignore[arg-type]
                except Exception as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=writer, args=(k,)) for k in work]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert all(store.sequences(d) == list(range(1, 41)) for d in devices)
        latest = {s.device_id: s.fps for s in store.devices(fleet="pg")}
        assert latest == dict.fromkeys(devices, 40.0)  # the newest sequence's figures, whoever wrote last
    finally:
        engine.dispose()


def test_postgres_replicas_meeting_a_new_device_both_keep_their_state(pg_url: str) -> None:
    """Two writers see the same brand-new devices at the same moment: one brings its status (online), the
    other a later telemetry message. Both must end up in the device row (before, the second insert of the
    new row did nothing and one writer's state was lost)."""
    engine = create_engine(pg_url)
    try:
        stores = [TelemetryStore(engine), TelemetryStore(engine, create=False)]
        now = time.time()
        rounds = 25
        errors: list[BaseException] = []
        barrier = threading.Barrier(2)

        def status(d: str) -> object:
            m = pb.Status(state=pb.Status.STATE_ONLINE, agent_version="9.9.9")
            m.started_at.FromNanoseconds(int(now * 1e9))
            stamp(m, Identity("pg", d), 1, [], now=now)
            return parse_message(f"edgefleet/v1/pg/{d}/status", encode(m, Encoding.JSON), None, 4096)

        def telemetry(d: str) -> object:
            m = pb.Telemetry()
            m.pipelines.add(name="default", fps=12.5)
            stamp(m, Identity("pg", d), 2, [], now=now)
            return parse_message(f"edgefleet/v1/pg/{d}/telemetry", encode(m, Encoding.JSON), None, 4096)

        def writer(k: int) -> None:
            for r in range(rounds):
                d = f"new-{r:02d}"
                item = status(d) if k == 0 else telemetry(d)
                barrier.wait(10)
                try:
                    stores[k].write([item])  # type: ignore[list-item]
                except Exception as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        states = {s.device_id: s for s in stores[0].devices(fleet="pg")}
        assert len(states) == rounds
        for s in states.values():
            assert s.online and s.agent_version == "9.9.9", s  # the status writer's state
            assert s.fps == 12.5, s  # the telemetry writer's state
    finally:
        engine.dispose()
