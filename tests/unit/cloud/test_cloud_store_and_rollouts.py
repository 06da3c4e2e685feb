"""The controller's database layer (migrations, registry rows, labels, leases) and the rollout engine,
driven step by step against a real database (SQLite and PostgreSQL) with a fake clock; the agents'
reports are written the way the AgentService writes them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from google.protobuf import json_format

from edgefleet.cloud import ConflictError, DatabaseError, InvalidArgumentError, NotFoundError
from edgefleet.cloud._db import MIGRATIONS, create_engine, metadata, migrate, schema_version, tables
from edgefleet.cloud._fleet_store import Store
from edgefleet.cloud._rollouts import RolloutEngine, plan_waves, validate_waves

PG = "postgresql://postgres@127.0.0.1:5432/"


def test_waves_are_validated_and_planned_cumulatively() -> None:
    assert validate_waves(["1", "10%", "100%"]) == ["1", "10%", "100%"]
    for bad in (["1", "50%"], ["0", "100%"], ["abc", "100%"], ["101%"], []):
        with pytest.raises(InvalidArgumentError):
            validate_waves(bad)
    assert plan_waves(20, ["1", "10%", "100%"]) == [0] + [1] + [2] * 18
    assert plan_waves(3, ["1", "100%"]) == [0, 1, 1]
    assert plan_waves(1, ["1", "10%", "100%"]) == [0]
    assert plan_waves(4, ["50%", "100%"]) == [0, 0, 1, 1]


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/c.db"
        return
    psycopg = pytest.importorskip("psycopg")
    name = f"edgefleet_unit_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG + "postgres", autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL: {exc}")
    try:
        yield PG + name
    finally:
        with psycopg.connect(PG + "postgres", autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url, clock=Clock())
    yield s
    s.close()


def pipes(ref: str, healthy: bool = True) -> list[dict[str, Any]]:
    return [{"name": "cam", "model_ref": ref, "state": "running", "health": {"fps": 10.0, "healthy": healthy}}]


def add_devices(store: Store, n: int, labels: dict[str, str]) -> list[str]:
    ids = [f"d{i}" for i in range(n)]
    for i in ids:
        store.hello(i, labels, {}, pipes("m:1.0.0"), f"r#{i}")
    return ids


def model_row(store: Store, version: str) -> dict[str, Any]:
    sha = uuid.uuid4().hex + uuid.uuid4().hex
    row = {
        "sha256": sha,
        "name": "m",
        "version": version,
        "size": 10,
        "task": "detection",
        "description": "",
        "signed_by": "k",
        "manifest": {},
        "pushed_at": store.clock(),
    }
    store.add_model(row)
    return row


def create(store: Store, ids: list[str], waves: list[str], version: str = "2.0.0", **params: Any) -> str:
    model = model_row(store, version)
    now = store.clock()
    rid = f"r-{uuid.uuid4().hex[:8]}"
    plan = plan_waves(len(ids), waves)
    members = [
        {
            "rollout_id": rid,
            "device_id": d,
            "wave": w,
            "state": "pending",
            "previous_ref": "m:1.0.0",
            "previous_sha": "",
            "command_id": "",
            "swapped_at": 0.0,
            "message": "",
            "updated_at": now,
        }
        for d, w in zip(ids, plan, strict=True)
    ]
    row = {
        "rollout_id": rid,
        "request_id": None,
        "model_name": "m",
        "model_ref": f"m:{version}",
        "sha256": model["sha256"],
        "selector": {},
        "waves": waves,
        "params": {"health_window_s": 5.0, "max_failure_ratio": 0.0, **params},
        "state": "running",
        "current_wave": 0,
        "message": "",
        "created_at": now,
        "updated_at": now,
        "lease_owner": "",
        "lease_until": 0.0,
    }
    store.create_rollout(row, members)
    return rid


def engine(store: Store) -> RolloutEngine:
    return RolloutEngine(store, "test", notify=lambda _d: None, stale_s=30.0)


def agent_applies(store: Store, rid: str, device: str, ok: bool = True, ref: str = "m:2.0.0") -> None:
    cmd = f"{rid}.{device}.apply"
    store.event(device, cmd, True, ok, "done" if ok else "refused: bad signature")
    if ok:
        store.clock.t += 0.1  # type: ignore[attr-defined]
        store.status(device, pipes(ref), {"healthy": True})


def good_pipes(ref: str, last_good: str) -> list[dict[str, Any]]:
    """A status report's pipelines: serving ``ref``, with ``last_good`` durably recorded on the device."""
    return [dict(p, last_good_ref=last_good) for p in pipes(ref)]


def confirm(store: Store, device: str, command_id: str, ref: str = "m:2.0.0") -> None:
    """The agent's health window passed: state.json says ``ref`` is last-good, and it says so."""
    store.event(device, command_id, False, True, f"{ref} healthy; now last-good", last_good=True)
    store.status(device, good_pipes(ref, ref), {"healthy": True})


def states(store: Store, rid: str) -> dict[str, str]:
    return {m["device_id"]: m["state"] for m in store.get_rollout(rid)["devices"]}


def swap_and_pass_health(store: Store, eng: RolloutEngine, rid: str, *devices: str) -> None:
    """The devices apply the command, report healthy on the new version through the health window, and
    then that it is their last-good."""
    for d in devices:
        agent_applies(store, rid, d)
    eng.step(rid)
    store.clock.t += 5  # type: ignore[attr-defined]
    for d in devices:
        confirm(store, d, f"{rid}.{d}.apply")
    eng.step(rid)


def test_waves_advance_only_after_swap_and_health_window(store: Store) -> None:
    ids = add_devices(store, 4, {"site": "a"})
    rid = create(store, ids, ["1", "100%"])
    eng, clock = engine(store), store.clock
    assert eng.step(rid) == ["d0"]
    assert store.pending_commands("d0")[0]["command_id"] == f"{rid}.d0.apply"
    assert store.pending_commands("d1") == []
    agent_applies(store, rid, "d0")
    eng.step(rid)
    assert states(store, rid)["d0"] == "health"
    clock.t += 5.0  # type: ignore[attr-defined]
    confirm(store, "d0", f"{rid}.d0.apply")
    touched = eng.step(rid)
    assert states(store, rid)["d0"] == "succeeded"
    assert sorted(touched) == ["d1", "d2", "d3"]
    # a controller restart is a new engine on the same database: nothing is redone
    eng2 = engine(store)
    assert eng2.step(rid) == []
    for d in ("d1", "d2", "d3"):
        agent_applies(store, rid, d)
    eng2.step(rid)
    clock.t += 5.0  # type: ignore[attr-defined]
    for d in ("d1", "d2", "d3"):
        confirm(store, d, f"{rid}.{d}.apply")
    eng2.step(rid)
    ro = store.get_rollout(rid)
    assert ro["state"] == "completed", ro
    assert set(states(store, rid).values()) == {"succeeded"}


def test_a_failure_aborts_and_rolls_back_the_wave(store: Store) -> None:
    ids = add_devices(store, 3, {"site": "a"})
    rid = create(store, ids, ["100%"])
    eng = engine(store)
    eng.step(rid)
    agent_applies(store, rid, "d0")
    agent_applies(store, rid, "d1", ok=False)
    eng.step(rid)
    ro = store.get_rollout(rid)
    assert ro["state"] == "aborted"
    assert "bad signature" in ro["message"]
    st = states(store, rid)
    assert st["d0"] == "rolling_back" and st["d1"] == "failed"
    back = store.pending_commands("d0")[0]
    assert back["kind"] == "rollback" and back["ref"] == "m:1.0.0"
    assert store.pending_commands("d1") == []  # refused: it never left 1.0.0
    store.event("d0", back["command_id"], True, True, "rolled back")
    eng.step(rid)
    assert states(store, rid)["d0"] == "rolled_back"


def test_health_gate_fails_a_device_whose_pipeline_rolled_back(store: Store) -> None:
    ids = add_devices(store, 2, {"site": "a"})
    rid = create(store, ids, ["100%"], max_failure_ratio=0.5)
    eng = engine(store)
    eng.step(rid)
    agent_applies(store, rid, "d0")
    agent_applies(store, rid, "d1", ref="m:1.0.0")  # swapped, then the SDK's health gate rolled it back
    eng.step(rid)
    eng.step(rid)
    st = states(store, rid)
    assert st["d1"] == "failed" and st["d0"] == "health"
    assert store.get_rollout(rid)["state"] == "running"  # 1 of 2 is not above 50 %


def test_operator_controls(store: Store) -> None:
    ids = add_devices(store, 2, {"site": "a"})
    rid = create(store, ids, ["1", "100%"])
    eng = engine(store)
    eng.control(rid, "pause")
    assert eng.step(rid) == []  # paused: no new commands
    with pytest.raises(ConflictError):
        eng.control(rid, "pause")
    eng.control(rid, "resume")
    assert eng.step(rid) == ["d0"]
    ro, touched = eng.control(rid, "rollback")
    assert ro["state"] == "rolled_back" and touched == ["d0"]
    assert {m["device_id"]: m["state"] for m in ro["devices"]} == {"d0": "rolling_back", "d1": "skipped"}
    with pytest.raises(ConflictError):
        eng.control(rid, "resume")


def test_offline_devices_do_not_block_a_wave_but_converge_later(store: Store) -> None:
    ids = add_devices(store, 2, {"site": "a"})
    store.disconnect("d1", "r#d1")
    store.clock.t += 60  # type: ignore[attr-defined]  # d1 is long gone
    store.status("d0", pipes("m:1.0.0"), {"healthy": True})
    rid = create(store, ids, ["100%"])
    eng = engine(store)
    eng.step(rid)
    swap_and_pass_health(store, eng, rid, "d0")
    ro = store.get_rollout(rid)
    assert ro["state"] == "completed" and "1 offline" in ro["message"]
    assert store.pending_commands("d1")[0]["command_id"] == f"{rid}.d1.apply"  # waiting for it
    store.hello("d1", {"site": "a"}, {}, pipes("m:1.0.0"), "r#d1b")
    agent_applies(store, rid, "d1")
    eng.step(rid)
    store.clock.t += 5  # type: ignore[attr-defined]
    confirm(store, "d1", f"{rid}.d1.apply")
    eng.step(rid)
    assert states(store, rid)["d1"] == "succeeded"


def test_migrations_are_versioned_and_idempotent(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        assert migrate(engine, lambda: 0.0) == MIGRATIONS[-1][0]
        assert migrate(engine, lambda: 0.0) == MIGRATIONS[-1][0]
        with engine.connect() as c:
            assert schema_version(c) == MIGRATIONS[-1][0]
            assert c.execute(sa.text("SELECT count(*) FROM schema_version")).scalar_one() == len(MIGRATIONS)
    finally:
        engine.dispose()


def test_a_database_migrated_by_a_newer_release_is_refused(db_url: str) -> None:
    """An older replica must not serve from a schema it does not know (it would misread the newer rows)."""

    engine = create_engine(db_url)
    try:
        newest = migrate(engine, lambda: 0.0)
        with engine.begin() as c:
            c.execute(sa.insert(tables["schema_version"]).values(version=newest + 1, applied_at=0.0))
        with pytest.raises(DatabaseError, match=rf"schema version {newest + 1}, newer than this controller knows"):
            migrate(engine, lambda: 0.0)
    finally:
        engine.dispose()


def test_a_v3_database_keeps_its_telemetry_and_stores_binary_payloads_after_v4_and_v5(db_url: str) -> None:
    from edgefleet.cloud._telemetry import TelemetryStore, parse_message
    from edgefleet.edge._telemetry._messages import Encoding, Identity, encode, stamp
    from edgefleet.proto.v1 import telemetry_pb2 as pb

    engine = create_engine(db_url)
    old = {"header": {"deviceId": "cam-1", "fleet": "lab", "sequence": "1", "time": "2026-03-01T10:00:00Z"}}
    try:
        with engine.begin() as c:  # as release v3 left it: no payload_pb column, one JSON row
            metadata.create_all(c, tables=[tables["schema_version"]])
            for version, _, step in MIGRATIONS[:3]:
                step(c)
                c.execute(sa.insert(tables["schema_version"]).values(version=version, applied_at=0.0))
            c.execute(sa.text("ALTER TABLE telemetry_messages DROP COLUMN payload_pb"))
            c.execute(sa.text("CREATE INDEX ix_telemetry_messages_received ON telemetry_messages (received_at)"))
            c.execute(
                sa.text(
                    "INSERT INTO telemetry_messages (device_id, seq, fleet, kind, ts, received_at, error_event, "
                    "payload) VALUES ('cam-1', 1, 'lab', 'status', 1772359200.0, 1772359200.0, false, :p)"
                ),
                {"p": json.dumps(old)},
            )
        assert migrate(engine, lambda: 0.0) == MIGRATIONS[-1][0] >= 5
        indexes = {i["name"] for i in sa.inspect(engine).get_indexes("telemetry_messages")}
        assert "ix_telemetry_messages_received" not in indexes  # v5: unused, dropped
        assert "ix_telemetry_messages_device_kind_ts" in indexes
        event = pb.Event(swap=pb.Event.Swap(pipeline="p", phase=pb.Event.Swap.PHASE_FAILED))
        stamp(event, Identity("lab", "cam-1"), 2, [])
        body = encode(event, Encoding.PROTOBUF)
        store = TelemetryStore(engine, create=False)
        parsed = parse_message("edgefleet/v1/lab/cam-1/events", body, "application/x-protobuf", 4096)
        assert store.write([parsed]).stored == 1
        got = store.recent("cam-1", 0)
        assert [(r["seq"], r["message"]) for r in got] == [(1, old), (2, json_format.MessageToDict(event))]
        with engine.connect() as c:
            assert c.execute(sa.text("SELECT payload_pb FROM telemetry_messages WHERE seq = 2")).scalar() == body
    finally:
        engine.dispose()


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    s = Store(f"sqlite:///{tmp_path}/x.db")
    try:
        with s.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
    finally:
        s.close()


def test_bad_urls_are_one_line_errors() -> None:
    with pytest.raises(DatabaseError, match="unsupported database URL"):
        Store("mysql://x/y")
    with pytest.raises(DatabaseError, match="cannot open or migrate"):
        Store("postgresql://nobody@127.0.0.1:1/none")


def test_registry_refuses_a_second_artifact_for_one_version(store: Store) -> None:
    row = model_row(store, "1.0.0")
    again, created = store.add_model(dict(row))
    assert not created and again["sha256"] == row["sha256"]
    other = dict(row, sha256="f" * 64)
    with pytest.raises(ConflictError, match="already in the registry"):
        store.add_model(other)
    assert store.model_by_ref("m:1.0.0")["sha256"] == row["sha256"]
    assert store.model_by_ref("m:latest")["sha256"] == row["sha256"]
    with pytest.raises(NotFoundError):
        store.model_by_ref("m:9.9.9")


def test_operator_labels_override_reported_ones(store: Store) -> None:
    store.hello("cam-1", {"site": "a", "tier": "x"}, {}, [], "r#1")
    d = store.set_labels("cam-1", {"site": "b"}, ["tier"])
    assert d["labels"] == {"site": "b"}
    store.hello("cam-1", {"site": "a", "tier": "x"}, {}, [], "r#2")  # the agent reconnects
    assert store.get_device("cam-1")["labels"] == {"site": "b"}
    assert [d["device_id"] for d in store.list_devices({"site": "b"})] == ["cam-1"]
    assert store.list_devices({"site": "a"}) == []


def test_only_the_connection_that_holds_a_device_marks_it_offline(store: Store) -> None:
    store.hello("cam-1", {}, {}, [], "replica1#a")
    store.hello("cam-1", {}, {}, [], "replica2#b")  # reconnected elsewhere
    store.disconnect("cam-1", "replica1#a")
    assert store.get_device("cam-1")["online"]
    assert store.forget_connections("replica2") == 1
    assert not store.get_device("cam-1")["online"]


def test_rollout_create_is_idempotent_and_one_active_per_model(store: Store) -> None:
    store.hello("d0", {}, {}, [], "r#0")
    rid = create(store, ["d0"], ["100%"])
    with pytest.raises(ConflictError, match="still active"):
        create(store, ["d0"], ["100%"], version="3.0.0")
    assert store.acquire_lease(rid, "a", 10)
    assert not store.acquire_lease(rid, "b", 10)
    assert store.acquire_lease(rid, "a", 10)
    store.clock.t += 11  # type: ignore[attr-defined]
    assert store.acquire_lease(rid, "b", 10)


def create_for(store: Store, selector: dict[str, str], waves: list[str], version: str) -> str:
    """A rollout to the devices matching ``selector``, as CreateRollout builds it."""
    ids = [d["device_id"] for d in store.list_devices(selector)]
    rid = create(store, ids, waves, version)
    with store.engine.begin() as c:
        c.execute(sa.update(tables["rollouts"]).where(tables["rollouts"].c.rollout_id == rid).values(selector=selector))
    return rid


def test_a_device_that_matches_later_follows_a_completed_rollout(store: Store) -> None:
    ids = add_devices(store, 2, {"site": "a"})
    rid = create_for(store, {"site": "a"}, ["100%"], "2.0.0")
    eng = engine(store)
    eng.step(rid)
    swap_and_pass_health(store, eng, rid, *ids)
    assert store.get_rollout(rid)["state"] == "completed"
    # a new device with other labels: nothing; then an operator labels it site=a: it joins
    store.hello("late", {"site": "b"}, {}, pipes("m:1.0.0"), "r#late")
    assert store.join_rollouts("late") == []
    store.set_labels("late", {"site": "a"}, [])
    assert store.join_rollouts("late") == [rid]
    assert store.join_rollouts("late") == []  # once
    assert store.pending_commands("late")[0]["command_id"] == f"{rid}.late.apply"
    assert rid in store.active_rollouts()  # the engine watches the newcomer's health
    swap_and_pass_health(store, eng, rid, "late")
    ro = store.get_rollout(rid)
    assert ro["state"] == "completed" and states(store, rid)["late"] == "succeeded"
    assert rid not in store.active_rollouts()


def test_a_new_device_joins_the_current_wave_of_a_running_rollout_and_the_newest_rollout_wins(store: Store) -> None:
    ids = add_devices(store, 3, {"site": "a"})
    old = create_for(store, {"site": "a"}, ["100%"], "2.0.0")
    with store.engine.begin() as c:  # an older, completed rollout of the same model to the same selector
        c.execute(sa.update(tables["rollouts"]).where(tables["rollouts"].c.rollout_id == old).values(state="completed"))
    store.clock.t += 1  # type: ignore[attr-defined]
    rid = create_for(store, {"site": "a"}, ["1", "100%"], "3.0.0")
    eng = engine(store)
    assert eng.step(rid) == ["d0"]  # wave 1: the canary
    store.hello("newcomer", {"site": "a"}, {}, pipes("m:1.0.0"), "r#n")
    assert store.join_rollouts("newcomer") == [rid]  # the newest matching rollout, not the older one
    member = next(m for m in store.get_rollout(rid)["devices"] if m["device_id"] == "newcomer")
    assert member["wave"] == 0 and member["state"] == "pending" and member["previous_ref"] == "m:1.0.0"
    assert eng.step(rid) == ["newcomer"]  # sent with the wave it joined
    assert store.pending_commands("newcomer")[0]["ref"] == "m:3.0.0"
    # a device already serving the rollout's artifact is left alone
    sha = store.get_rollout(rid)["sha256"]
    serving = [{"name": "cam", "model_ref": "m:3.0.0", "model_sha256": sha, "state": "running", "health": {}}]
    store.hello("current", {"site": "a"}, {}, serving, "r#c")
    assert store.join_rollouts("current") == []
    assert len(ids) == 3


def member(store: Store, rid: str, device: str) -> dict[str, Any]:
    return next(m for m in store.get_rollout(rid)["devices"] if m["device_id"] == device)


def test_a_member_succeeds_only_once_the_device_reports_the_version_last_good(store: Store) -> None:
    """Found by the random-kill run: the controller marked a member succeeded from status reports alone
    while the device's last-good was still the old version."""
    ids = add_devices(store, 1, {"site": "a"})
    rid = create(store, ids, ["100%"])
    eng, clock = engine(store), store.clock
    eng.step(rid)
    agent_applies(store, rid, "d0")
    eng.step(rid)
    for _ in range(4):  # the whole window: serving the new version, healthy, last-good still the old one
        clock.t += 1.5  # type: ignore[attr-defined]
        store.status("d0", good_pipes("m:2.0.0", "m:1.0.0"), {"healthy": True})
        eng.step(rid)
    assert states(store, rid)["d0"] == "health", member(store, rid, "d0")
    assert store.get_rollout(rid)["state"] == "running"
    confirm(store, "d0", f"{rid}.d0.apply")
    eng.step(rid)
    assert states(store, rid)["d0"] == "succeeded"
    assert store.get_rollout(rid)["state"] == "completed"


def test_a_device_that_crashes_in_its_window_is_unknown_then_resent_and_converges(store: Store) -> None:
    """The kill inside the health window: the last report before the crash must not make the member
    succeed; the device comes back on its old last-good, the controller re-sends, the device converges."""
    ids = add_devices(store, 1, {"site": "a"})
    rid = create(store, ids, ["100%"])
    eng, clock = engine(store), store.clock
    eng.step(rid)
    agent_applies(store, rid, "d0")
    eng.step(rid)
    store.status("d0", good_pipes("m:2.0.0", "m:1.0.0"), {"healthy": True})
    clock.t += 0.5  # type: ignore[attr-defined]
    store.disconnect("d0", "r#d0")  # SIGKILL: the stream breaks
    clock.t += 10  # type: ignore[attr-defined]  # the controller's window is long over
    eng.step(rid)
    m = member(store, rid, "d0")
    assert m["state"] == "unknown", m
    assert "disconnected" in m["message"]
    assert store.get_rollout(rid)["state"] == "running"  # expected back (seen within the stale time)
    # the agent restarts on its last-good 1.0.0; the first report after the Hello says so
    store.hello("d0", {"site": "a"}, {}, good_pipes("m:1.0.0", "m:1.0.0"), "r#d0-2")
    clock.t += 0.3  # type: ignore[attr-defined]
    store.status("d0", good_pipes("m:1.0.0", "m:1.0.0"), {"healthy": True})
    assert eng.step(rid) == ["d0"]
    (again,) = store.pending_commands("d0")
    assert again["command_id"] == f"{rid}.d0.apply.2" and again["ref"] == "m:2.0.0"
    m = member(store, rid, "d0")
    assert m["state"] == "applying" and m["command_id"] == again["command_id"], m
    assert "serves m:1.0.0" in m["message"] and "attempt 2" in m["message"]
    # the second attempt goes through its whole window
    store.event("d0", again["command_id"], True, True, "serving m:2.0.0")
    clock.t += 0.1  # type: ignore[attr-defined]
    store.status("d0", good_pipes("m:2.0.0", "m:1.0.0"), {"healthy": True})
    eng.step(rid)
    assert states(store, rid)["d0"] == "health"
    clock.t += 5  # type: ignore[attr-defined]
    confirm(store, "d0", again["command_id"])
    eng.step(rid)
    assert states(store, rid)["d0"] == "succeeded"
    assert store.get_rollout(rid)["state"] == "completed"


def test_a_device_that_never_converges_fails_after_bounded_retries_with_the_reason(store: Store) -> None:
    ids = add_devices(store, 1, {"site": "a"})
    rid = create(store, ids, ["100%"])
    clock = store.clock
    eng = RolloutEngine(store, "test", notify=lambda _d: None, stale_s=30.0, max_attempts=3, retry_backoff_s=2.0)
    eng.step(rid)
    sent = []
    for attempt in range(1, 4):  # every attempt: applied, then the device is back on 1.0.0 (a crash loop)
        cmd = member(store, rid, "d0")["command_id"]
        sent.append(cmd)
        store.event("d0", cmd, True, True, "serving m:2.0.0")
        eng.step(rid)
        clock.t += 0.5  # type: ignore[attr-defined]
        store.disconnect("d0", f"r#d0-{attempt - 1}" if attempt > 1 else "r#d0")
        store.hello("d0", {"site": "a"}, {}, good_pipes("m:1.0.0", "m:1.0.0"), f"r#d0-{attempt}")
        clock.t += 0.3  # type: ignore[attr-defined]
        store.status("d0", good_pipes("m:1.0.0", "m:1.0.0"), {"healthy": True})
        eng.step(rid)
        if attempt < 3:
            m = member(store, rid, "d0")
            assert m["state"] == "applying", m
            if attempt == 2:  # the first re-send goes at once, the next ones back off
                assert store.pending_commands("d0") == [] and "in 2 s" in m["message"], m
                clock.t += 2.0  # type: ignore[attr-defined]
            assert [d["command_id"] for d in store.pending_commands("d0")] == [f"{rid}.d0.apply.{attempt + 1}"]
    assert sent == [f"{rid}.d0.apply", f"{rid}.d0.apply.2", f"{rid}.d0.apply.3"]
    ro = store.get_rollout(rid)
    assert ro["state"] == "aborted", ro
    assert "did not converge after 3 attempts" in ro["message"] and "serves m:1.0.0" in ro["message"], ro
    # the wave is rolled back: its desired state is the version it serves (a no-op on the device)
    assert member(store, rid, "d0")["state"] == "rolling_back"
    assert [(d["kind"], d["ref"]) for d in store.pending_commands("d0")] == [("rollback", "m:1.0.0")]


def test_a_completed_rollout_re_sends_to_a_device_that_comes_back_on_another_version(store: Store) -> None:
    """Level-triggered: the desired state holds after the rollout is over, whatever brought the device off it."""
    ids = add_devices(store, 1, {"site": "a"})
    rid = create(store, ids, ["100%"])
    eng, clock = engine(store), store.clock
    eng.step(rid)
    agent_applies(store, rid, "d0")
    eng.step(rid)
    clock.t += 5  # type: ignore[attr-defined]
    confirm(store, "d0", f"{rid}.d0.apply")
    eng.step(rid)
    assert store.get_rollout(rid)["state"] == "completed"
    assert store.diverged_rollouts() == []
    assert rid not in store.active_rollouts()
    # the device's store lost the package: it restarts on the config's 1.0.0
    store.hello("d0", {"site": "a"}, {}, good_pipes("m:1.0.0", ""), "r#d0-2")
    clock.t += 0.3  # type: ignore[attr-defined]
    store.status("d0", good_pipes("m:1.0.0", ""), {"healthy": True})
    assert store.diverged_rollouts() == [rid]
    assert eng.step(rid) == ["d0"]
    assert store.pending_commands("d0")[0]["command_id"] == f"{rid}.d0.apply.2"
    assert states(store, rid)["d0"] == "applying"


def test_replicas_decide_a_re_send_once(store: Store) -> None:
    """Two engines (replicas) on one database: the re-send is decided under the rollout's lease, once."""
    ids = add_devices(store, 1, {"site": "a"})
    rid = create(store, ids, ["100%"])
    one = RolloutEngine(store, "one", notify=lambda _d: None, stale_s=30.0)
    two = RolloutEngine(store, "two", notify=lambda _d: None, stale_s=30.0)
    assert one.tick() == ["d0"]
    assert two.tick() == []  # not its lease
    store.event("d0", f"{rid}.d0.apply", True, True, "serving m:2.0.0")
    store.clock.t += 0.5  # type: ignore[attr-defined]
    store.disconnect("d0", "r#d0")
    store.hello("d0", {"site": "a"}, {}, good_pipes("m:1.0.0", "m:1.0.0"), "r#d0-2")
    store.clock.t += 0.3  # type: ignore[attr-defined]
    store.status("d0", good_pipes("m:1.0.0", "m:1.0.0"), {"healthy": True})
    touched = two.tick() + one.tick() + one.tick()
    assert touched == ["d0"]
    assert [d["command_id"] for d in store.pending_commands("d0")] == [f"{rid}.d0.apply.2"]


def test_a_v5_database_gets_the_convergence_columns_with_their_defaults(db_url: str) -> None:
    from edgefleet.cloud._db import _V7_COLUMNS

    engine = create_engine(db_url)
    try:
        with engine.begin() as c:  # as release v5 left it: the tables without the v6 and v7 columns, one member row
            metadata.create_all(c, tables=[tables["schema_version"]])
            for version, _, step in MIGRATIONS[:5]:
                step(c)
                c.execute(sa.insert(tables["schema_version"]).values(version=version, applied_at=0.0))
            for table, column, _, _ in _V7_COLUMNS:
                c.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
            c.execute(
                sa.text(
                    "INSERT INTO desired (device_id, model_name, kind, sha256, ref, command_id, rollout_id, "
                    "health_window_s, state, message, updated_at, done_at) VALUES "
                    "('d0', 'm', 'apply', '', 'm:2.0.0', 'r-1.d0.apply', 'r-1', 5, 'applied', '', 0, 0)"
                )
            )
        assert migrate(engine, lambda: 0.0) == MIGRATIONS[-1][0] >= 6
        for table, column, _, _ in _V7_COLUMNS:
            assert column in {col["name"] for col in sa.inspect(engine).get_columns(table)}, (table, column)
        with engine.connect() as c:
            row = c.execute(sa.text("SELECT attempt, not_before, last_good_at FROM desired")).one()
        assert tuple(row) == (1, 0.0, 0.0)
    finally:
        engine.dispose()
