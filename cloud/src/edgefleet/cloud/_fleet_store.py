"""Reads and writes of the controller's state. Methods are synchronous (one transaction each); the
asyncio server calls them through :meth:`Store.call`, which runs them on a small thread pool (one thread
for SQLite, whose writers serialise anyway) so the event loop never blocks on the database."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ._db import create_engine, desired, devices, migrate, model_variants, models, rollout_devices, rollouts
from ._errors import ConflictError, DatabaseError, NotFoundError
from ._variants import VariantStore, describe, pick_variant

__all__ = ["Row", "Store", "apply_command", "effective_labels", "matches"]

P = ParamSpec("P")
T = TypeVar("T")
Row = dict[str, Any]


def effective_labels(row: Mapping[str, Any]) -> dict[str, str]:
    labels = dict(row["reported_labels"])
    for k, v in row["label_overrides"].items():
        if v is None:
            labels.pop(k, None)
        else:
            labels[k] = v
    return labels


def apply_command(ro: Mapping[str, Any], device_id: str, sha256: str = "") -> Row:
    """The desired-state row that tells ``device_id`` to serve rollout ``ro``'s artifact (``sha256``: the
    variant picked for the device, when the version has per-target artifacts)."""
    return {
        "device_id": device_id,
        "model_name": ro["model_name"],
        "kind": "apply",
        "sha256": sha256 or ro["sha256"],
        "ref": ro["model_ref"],
        "command_id": f"{ro['rollout_id']}.{device_id}.apply",
        "rollout_id": ro["rollout_id"],
        "health_window_s": float(ro["params"].get("health_window_s", 30.0)),
    }


def matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


class Store:
    """The controller's database. ``url``: ``sqlite:///path`` or ``postgresql://...``."""

    def __init__(self, url: str, *, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.engine: Engine = create_engine(url)
        self.clock = clock
        try:
            self.version = migrate(self.engine, clock)
        except BaseException:
            self.engine.dispose()
            raise
        #: called with (operation, seconds) after every :meth:`call` (the controller's db latency metric)
        self.observe: Callable[[str, float], None] | None = None
        workers = 1 if self.engine.dialect.name == "sqlite" else 8
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgefleet-db")

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` on the database pool; SQLAlchemy errors become DatabaseError (one line)."""
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
        except sa.exc.SQLAlchemyError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise DatabaseError(f"database error: {first}") from exc
        finally:
            if self.observe is not None:
                self.observe(getattr(fn, "__name__", "call"), time.perf_counter() - started)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)
        self.engine.dispose()

    # --- models ------------------------------------------------------------------------------------
    def add_model(self, row: Row) -> tuple[Row, bool]:
        with self.engine.begin() as c:
            old = c.execute(sa.select(models).where(models.c.sha256 == row["sha256"])).mappings().first()
            if old is not None:
                return dict(old), False
            same = (
                c.execute(sa.select(models).where(models.c.name == row["name"], models.c.version == row["version"]))
                .mappings()
                .first()
            )
            if same is not None:
                raise ConflictError(
                    f"{row['name']}:{row['version']} is already in the registry with another artifact "
                    f"({same['sha256'][:12]}…); publish a new version"
                )
            c.execute(sa.insert(models).values(**row))
            return row, True

    def list_models(self, name: str = "") -> list[Row]:
        q = sa.select(models).order_by(models.c.name, models.c.pushed_at)
        if name:
            q = q.where(models.c.name == name)
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(q).mappings()]

    def model_by_ref(self, ref: str) -> Row:
        name, _, version = ref.partition(":")
        with self.engine.connect() as c:
            q = sa.select(models).where(models.c.name == name)
            if version and version != "latest":
                q = q.where(models.c.version == version)
            else:
                q = q.order_by(models.c.pushed_at.desc())
            row = c.execute(q).mappings().first()
        if row is None:
            raise NotFoundError(f"model {ref} is not in the registry (see `edgefleet models ls`)")
        return dict(row)

    def model_by_sha(self, sha256: str) -> Row | None:
        """The registry row of an artifact: a version's portable one, or one of its per-target variants."""
        with self.engine.connect() as c:
            row = c.execute(sa.select(models).where(models.c.sha256 == sha256)).mappings().first()
            if row is None:
                row = c.execute(sa.select(model_variants).where(model_variants.c.sha256 == sha256)).mappings().first()
        return dict(row) if row else None

    # --- devices -----------------------------------------------------------------------------------
    def hello(self, device_id: str, labels: dict[str, str], caps: Row, pipelines: list[Row], conn_id: str) -> Row:
        now = self.clock()
        with self.engine.begin() as c:
            old = c.execute(sa.select(devices.c.device_id).where(devices.c.device_id == device_id)).first()
            values = {
                "reported_labels": labels,
                "capabilities": caps,
                "pipelines": pipelines,
                "online": True,
                "connection": conn_id,
                "last_seen": now,
                "connected_at": now,
            }
            if old is None:
                c.execute(
                    sa.insert(devices).values(
                        device_id=device_id,
                        label_overrides={},
                        health={},
                        health_at=0.0,
                        first_seen=now,
                        last_event="",
                        **values,
                    )
                )
            else:
                c.execute(sa.update(devices).where(devices.c.device_id == device_id).values(**values))
            return self._device(c, device_id)

    def disconnect(self, device_id: str, conn_id: str) -> None:
        with self.engine.begin() as c:
            c.execute(
                sa.update(devices)
                .where(devices.c.device_id == device_id, devices.c.connection == conn_id)
                .values(online=False, last_seen=self.clock())
            )

    def forget_connections(self, replica_id: str) -> int:
        """Mark offline the devices a previous life of this replica held (after a crash)."""
        with self.engine.begin() as c:
            res = c.execute(
                sa.update(devices)
                .where(devices.c.connection.like(f"{replica_id}#%"), devices.c.online.is_(True))
                .values(online=False)
            )
            return int(res.rowcount or 0)

    def status(self, device_id: str, pipelines: list[Row], health: Row) -> None:
        """One device's status report, received now (the controller batches them: ``status_many``)."""
        self.status_many([{"device_id": device_id, "pipelines": pipelines, "health": health, "at": self.clock()}])

    def status_many(self, rows: list[Row]) -> None:
        """Several devices' latest status reports (``device_id``, ``pipelines``, ``health``, ``at``) in one
        transaction."""
        if not rows:
            return
        stmt = (
            sa.update(devices)
            .where(devices.c.device_id == sa.bindparam("b_device"))
            .values(
                pipelines=sa.bindparam("b_pipelines"),
                health=sa.bindparam("b_health"),
                health_at=sa.bindparam("b_at"),
                last_seen=sa.bindparam("b_at"),
            )
        )
        params = [
            {"b_device": r["device_id"], "b_pipelines": r["pipelines"], "b_health": r["health"], "b_at": r["at"]}
            for r in rows
        ]
        with self.engine.begin() as c:
            c.execute(stmt, params)

    def event(
        self, device_id: str, command_id: str, done: bool, ok: bool, message: str, *, last_good: bool = False
    ) -> None:
        """A command event from the device. ``last_good``: it has written the command's version as its
        last-good (its health window passed), the one thing that lets a rollout member succeed."""
        now = self.clock()
        with self.engine.begin() as c:
            if last_good:
                c.execute(
                    sa.update(desired)
                    .where(desired.c.command_id == command_id, desired.c.device_id == device_id)
                    .values(last_good_at=now)
                )
            row = c.execute(
                sa.select(desired.c.state).where(desired.c.command_id == command_id, desired.c.device_id == device_id)
            ).first()
            if row is not None and row[0] not in ("applied", "failed"):
                state = ("applied" if ok else "failed") if done else "applying"
                c.execute(
                    sa.update(desired)
                    .where(desired.c.command_id == command_id)
                    .values(state=state, message=message, updated_at=now, done_at=now if done else 0.0)
                )
            c.execute(
                sa.update(devices).where(devices.c.device_id == device_id).values(last_event=message, last_seen=now)
            )

    def _device(self, c: Connection, device_id: str) -> Row:
        row = c.execute(sa.select(devices).where(devices.c.device_id == device_id)).mappings().first()
        if row is None:
            raise NotFoundError(f"no device {device_id!r} (see `edgefleet devices ls`)")
        out = dict(row)
        out["labels"] = effective_labels(out)
        out["desired"] = [
            dict(r)
            for r in c.execute(
                sa.select(desired).where(desired.c.device_id == device_id).order_by(desired.c.model_name)
            ).mappings()
        ]
        return out

    def get_device(self, device_id: str) -> Row:
        with self.engine.connect() as c:
            return self._device(c, device_id)

    def list_devices(self, selector: Mapping[str, str] | None = None) -> list[Row]:
        with self.engine.connect() as c:
            rows = [dict(r) for r in c.execute(sa.select(devices).order_by(devices.c.device_id)).mappings()]
            want = [r for r in rows if matches(effective_labels(r), selector or {})]
            by_dev: dict[str, list[Row]] = {}
            for d in c.execute(sa.select(desired).order_by(desired.c.model_name)).mappings():
                by_dev.setdefault(d["device_id"], []).append(dict(d))
        for r in want:
            r["labels"] = effective_labels(r)
            r["desired"] = by_dev.get(r["device_id"], [])
        return want

    def set_labels(self, device_id: str, set_: Mapping[str, str], remove: list[str]) -> Row:
        with self.engine.begin() as c:
            dev = self._device(c, device_id)
            overrides = dict(dev["label_overrides"])
            overrides.update(set_)
            for k in remove:
                overrides[k] = None
            c.execute(sa.update(devices).where(devices.c.device_id == device_id).values(label_overrides=overrides))
            return self._device(c, device_id)

    # --- desired state -----------------------------------------------------------------------------
    def set_desired(self, row: Row) -> None:
        """Replace a device's desired state for one model name (a new command id supersedes the old)."""
        with self.engine.begin() as c:
            self._put_desired(c, row, self.clock())

    @staticmethod
    def _put_desired(c: Connection, row: Row, now: float) -> None:
        """Replace the device's desired row for ``row["model_name"]`` with ``row``, pending."""
        key = (desired.c.device_id == row["device_id"], desired.c.model_name == row["model_name"])
        c.execute(sa.delete(desired).where(*key))
        c.execute(sa.insert(desired).values(state="pending", message="", updated_at=now, done_at=0.0, **row))

    def send_wave(self, rollout_id: str, rows: list[Row]) -> None:
        """Set the desired state of many devices and mark them ``applying`` in one transaction (a wave
        of 1,000 devices is one commit, not 2,000)."""
        now = self.clock()
        with self.engine.begin() as c:
            for row in rows:
                self._put_desired(c, row, now)
                c.execute(
                    sa.update(rollout_devices)
                    .where(rollout_devices.c.rollout_id == rollout_id, rollout_devices.c.device_id == row["device_id"])
                    .values(updated_at=now, state="applying", command_id=row["command_id"], message="command sent")
                )

    def pending_commands(self, device_id: str) -> list[Row]:
        """The device's commands to send now: not finished, and not waiting out a re-send's backoff."""
        with self.engine.connect() as c:
            q = sa.select(desired).where(
                desired.c.device_id == device_id,
                desired.c.state.in_(("pending", "applying")),
                desired.c.not_before <= self.clock(),
            )
            return [dict(r) for r in c.execute(q).mappings()]

    def all_pending(self) -> list[tuple[str, str]]:
        with self.engine.connect() as c:
            q = sa.select(desired.c.device_id, desired.c.command_id).where(
                desired.c.state.in_(("pending", "applying")), desired.c.not_before <= self.clock()
            )
            return [(r[0], r[1]) for r in c.execute(q)]

    def resend(self, rollout_id: str, old_command_id: str, row: Row, message: str) -> bool:
        """Replace the desired command ``old_command_id`` with ``row`` (a new attempt, pending from
        ``row["not_before"]``) and point the rollout member at it, in one transaction. A compare-and-set:
        False, and nothing written, when the desired row no longer holds ``old_command_id``."""
        now = self.clock()
        with self.engine.begin() as c:
            res = c.execute(
                sa.update(desired)
                .where(
                    desired.c.device_id == row["device_id"],
                    desired.c.model_name == row["model_name"],
                    desired.c.command_id == old_command_id,
                )
                .values(**row, state="pending", message="", updated_at=now, done_at=0.0, last_good_at=0.0)
            )
            if not res.rowcount:
                return False
            c.execute(
                sa.update(rollout_devices)
                .where(rollout_devices.c.rollout_id == rollout_id, rollout_devices.c.device_id == row["device_id"])
                .values(state="applying", command_id=row["command_id"], message=message, updated_at=now)
            )
            return True

    def diverged_rollouts(self) -> list[str]:
        """Rollouts with a device that is connected, has reported since it connected, and serves another
        version than its desired row says it was told and applied: the level trigger of reconciliation
        (the rollout engine then decides, under the rollout's lease)."""
        q = (
            sa.select(desired.c.rollout_id, desired.c.model_name, desired.c.ref, devices.c.pipelines)
            .select_from(desired.join(devices, desired.c.device_id == devices.c.device_id))
            .where(
                desired.c.state == "applied",
                desired.c.kind == "apply",
                desired.c.rollout_id != "",
                devices.c.online.is_(True),
                devices.c.health_at > devices.c.connected_at,
            )
        )
        out: list[str] = []
        with self.engine.connect() as c:
            for rid, name, ref, pipes in c.execute(q):
                if rid in out:
                    continue
                mine = [p for p in pipes or [] if str(p.get("model_ref", "")).split(":")[0] == name]
                if not mine or any(p.get("model_ref") != ref for p in mine):
                    out.append(rid)
        return out

    def desired_by_command(self, command_ids: list[str]) -> dict[str, Row]:
        if not command_ids:
            return {}
        with self.engine.connect() as c:
            q = sa.select(desired).where(desired.c.command_id.in_(command_ids))
            return {r["command_id"]: dict(r) for r in c.execute(q).mappings()}

    # --- rollouts ----------------------------------------------------------------------------------
    def create_rollout(self, row: Row, members: list[Row]) -> tuple[Row, bool]:
        with self.engine.begin() as c:
            if row.get("request_id"):
                old = c.execute(
                    sa.select(rollouts.c.rollout_id).where(rollouts.c.request_id == row["request_id"])
                ).first()
                if old is not None:
                    return self._rollout(c, old[0]), False
            active = c.execute(
                sa.select(rollouts.c.rollout_id).where(
                    rollouts.c.model_name == row["model_name"], rollouts.c.state.in_(("running", "paused"))
                )
            ).first()
            if active is not None:
                raise ConflictError(
                    f"rollout {active[0]} of {row['model_name']} is still active; abort or wait for it first"
                )
            c.execute(sa.insert(rollouts).values(**row))
            if members:
                c.execute(sa.insert(rollout_devices), members)
            return self._rollout(c, row["rollout_id"]), True

    def _rollout(self, c: Connection, rollout_id: str) -> Row:
        row = c.execute(sa.select(rollouts).where(rollouts.c.rollout_id == rollout_id)).mappings().first()
        if row is None:
            raise NotFoundError(f"no rollout {rollout_id!r} (see `edgefleet rollout ls`)")
        out = dict(row)
        out["devices"] = [
            dict(r)
            for r in c.execute(
                sa.select(rollout_devices)
                .where(rollout_devices.c.rollout_id == rollout_id)
                .order_by(rollout_devices.c.wave, rollout_devices.c.device_id)
            ).mappings()
        ]
        return out

    def rollout_params(self, rollout_id: str) -> dict[str, Any]:
        """A rollout's params (gates, windows); {} for an unknown id."""
        with self.engine.connect() as c:
            value = c.execute(sa.select(rollouts.c.params).where(rollouts.c.rollout_id == rollout_id)).scalar()
        return dict(value) if isinstance(value, dict) else {}

    def get_rollout(self, rollout_id: str = "") -> Row:
        with self.engine.connect() as c:
            if not rollout_id:
                last = c.execute(
                    sa.select(rollouts.c.rollout_id).order_by(rollouts.c.created_at.desc()).limit(1)
                ).first()
                if last is None:
                    raise NotFoundError("no rollouts yet (start one with `edgefleet deploy`)")
                rollout_id = last[0]
            return self._rollout(c, rollout_id)

    def list_rollouts(self, limit: int = 20) -> list[Row]:
        with self.engine.connect() as c:
            ids = [
                r[0]
                for r in c.execute(sa.select(rollouts.c.rollout_id).order_by(rollouts.c.created_at.desc()).limit(limit))
            ]
            return [self._rollout(c, i) for i in ids]

    def join_rollouts(self, device_id: str) -> list[str]:
        """A device that matches a rollout's selector after the rollout started (a new device, or new
        labels) follows it: for each model, the newest rollout (running, paused or completed) whose
        selector matches the device takes it in, unless the device is already a member, is already told
        to serve that artifact or serves it. A running or paused rollout adds it to its current wave; a
        completed one sends it the command at once (the rollout engine then watches its health like any
        member's). Returns the rollouts joined."""
        now = self.clock()
        joined: list[str] = []
        with self.engine.begin() as c:
            dev = self._device(c, device_id)
            candidates = c.execute(
                sa.select(rollouts)
                .where(rollouts.c.state.in_(("running", "paused", "completed")))
                .order_by(rollouts.c.created_at.desc())
            ).mappings()
            decided: set[str] = set()
            for ro in candidates:
                if ro["model_name"] in decided or not matches(dev["labels"], ro["selector"]):
                    continue
                decided.add(ro["model_name"])  # the newest matching rollout of a model decides
                member = c.execute(
                    sa.select(rollout_devices.c.state).where(
                        rollout_devices.c.rollout_id == ro["rollout_id"], rollout_devices.c.device_id == device_id
                    )
                ).first()
                told = any(d["model_name"] == ro["model_name"] and d["sha256"] == ro["sha256"] for d in dev["desired"])
                serving = any(p.get("model_sha256") == ro["sha256"] for p in dev["pipelines"] or [])
                if member is not None or told or serving:
                    continue
                name = ro["model_name"]
                pipes = dev["pipelines"] or []
                prev: Row = next((p for p in pipes if str(p.get("model_ref", "")).split(":")[0] == name), {})
                completed = ro["state"] == "completed"
                pick, variant = self._variant_for(c, dict(ro), dev)
                command = apply_command(dict(ro), device_id, pick.get("sha256", ""))
                state = ("applying" if completed else "pending") if variant is not None else "failed"
                message = "joined: its labels match the selector" + ("; command sent" if completed else "")
                if variant is None:
                    message = (
                        f"joined, but no artifact of {ro['model_ref']} matches it ({describe(dev['capabilities'])})"
                    )
                c.execute(
                    sa.insert(rollout_devices).values(
                        rollout_id=ro["rollout_id"],
                        device_id=device_id,
                        wave=len(ro["waves"]) - 1 if completed else ro["current_wave"],
                        state=state,
                        previous_ref=prev.get("model_ref", ""),
                        previous_sha=prev.get("model_sha256", ""),
                        command_id=command["command_id"] if completed and variant is not None else "",
                        swapped_at=0.0,
                        message=message,
                        updated_at=now,
                        variant=variant or "",
                        variant_sha=pick.get("sha256", ""),
                    )
                )
                if completed and variant is not None:
                    self._put_desired(c, command, now)
                joined.append(ro["rollout_id"])
        return joined

    @staticmethod
    def _variant_for(c: Connection, ro: Mapping[str, Any], dev: Row) -> tuple[Row, str | None]:
        """The artifact variant of a model rollout's version for ``dev``: ({}, "") when the version has one
        artifact (or the rollout is a pipeline spec's), ({}, None) when none of its variants matches."""
        if str(ro["model_name"]).startswith("spec/"):
            return {}, ""
        name, _, version = str(ro["model_ref"]).partition(":")
        base = c.execute(sa.select(models).where(models.c.name == name, models.c.version == version)).mappings().first()
        if base is None:
            return {}, ""
        choices = VariantStore.candidates_in(c, dict(base))
        if not any(x["variant"] for x in choices):
            return {}, ""
        pick = pick_variant(choices, dev["capabilities"])
        return (pick, pick["variant"] or "portable") if pick is not None else ({}, None)

    def active_rollouts(self) -> list[str]:
        """Rollouts that still need driving: running or paused, or with members mid-command."""
        busy = sa.exists().where(
            rollout_devices.c.rollout_id == rollouts.c.rollout_id,
            rollout_devices.c.state.in_(("applying", "health", "unknown", "rolling_back")),
        )
        q = sa.select(rollouts.c.rollout_id).where(rollouts.c.state.in_(("running", "paused")) | busy)
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(q.order_by(rollouts.c.created_at))]

    def acquire_lease(self, rollout_id: str, owner: str, seconds: float) -> bool:
        now = self.clock()
        with self.engine.begin() as c:
            res = c.execute(
                sa.update(rollouts)
                .where(
                    rollouts.c.rollout_id == rollout_id,
                    (rollouts.c.lease_owner == owner) | (rollouts.c.lease_until < now),
                )
                .values(lease_owner=owner, lease_until=now + seconds)
            )
            return bool(res.rowcount)

    def update_rollout(self, rollout_id: str, expect_state: str | None = None, **values: Any) -> bool:
        with self.engine.begin() as c:
            q = sa.update(rollouts).where(rollouts.c.rollout_id == rollout_id)
            if expect_state is not None:
                q = q.where(rollouts.c.state == expect_state)
            res = c.execute(q.values(updated_at=self.clock(), **values))
            return bool(res.rowcount)

    def update_member(self, rollout_id: str, device_id: str, **values: Any) -> None:
        with self.engine.begin() as c:
            c.execute(
                sa.update(rollout_devices)
                .where(rollout_devices.c.rollout_id == rollout_id, rollout_devices.c.device_id == device_id)
                .values(updated_at=self.clock(), **values)
            )

    def rollout_snapshot(self, rollout_id: str) -> tuple[Row, dict[str, Row]]:
        """The rollout with its members, and each member device's row (online, health, pipelines)."""
        with self.engine.connect() as c:
            ro = self._rollout(c, rollout_id)
            ids = [m["device_id"] for m in ro["devices"]]
            devs = {
                r["device_id"]: dict(r)
                for r in c.execute(sa.select(devices).where(devices.c.device_id.in_(ids))).mappings()
            }
        return ro, devs

    def require_state(self, rollout_id: str, allowed: tuple[str, ...], action: str) -> Row:
        ro = self.get_rollout(rollout_id)
        if ro["state"] not in allowed:
            raise ConflictError(f"cannot {action} rollout {ro['rollout_id']}: it is {ro['state']}")
        return ro
