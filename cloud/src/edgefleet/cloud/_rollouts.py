"""Rollouts: waves over a label selector, gated per wave on swap success and runtime health.

State lives in the database only, so a controller that restarts (or another replica that takes the
lease over) continues where the last one stopped; command ids are deterministic per rollout, device and
attempt, so re-issuing one after a crash is a duplicate the agent ignores (it repeats the stored outcome).

Member states: ``pending`` → ``applying`` → ``health`` → ``succeeded`` | ``failed``; ``health`` →
``unknown`` when the device disconnects (or stops reporting) during its window, back to ``health`` (a
new window) or to a re-send when it reports again; on abort with rollback or an operator rollback:
→ ``rolling_back`` → ``rolled_back``; never started: ``skipped``.

Convergence. A member succeeds only when the device itself has reported the version as its last-good
(the agent says so after its health window, once state.json is written), after a whole window during
which it stayed connected and reported, healthy, on the new version. Reconciliation is level-triggered:
whenever a connected device reports that it serves, or holds as last-good, another version than the one
its desired row says it applied (a crash in the window brings it back on its old last-good), the engine
re-sends under a new command id (``<rollout>.<device>.apply.<attempt>``): at once, then with doubling
backoff, until ``max_attempts``; then the member fails with the reason. Decisions are taken by the
replica holding the rollout's lease; the re-send is a compare-and-set on the desired row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._camera_health import DEFAULT_CAMERA_GRACE_S, camera_gate
from ._errors import InvalidArgumentError
from ._fleet_store import Row, Store, apply_command
from ._shadow_gates import quality_verdict

__all__ = ["RolloutEngine", "new_rollout_id", "plan_waves", "validate_waves"]

_log = logging.getLogger(__name__)
_WAVE_RE = re.compile(r"^(\d+)(%?)\Z")
BUSY = ("applying", "health", "unknown", "rolling_back")
TERMINAL = ("succeeded", "failed", "rolled_back", "skipped")


def new_rollout_id() -> str:
    return "r-" + secrets.token_hex(4)


def validate_waves(waves: Sequence[str]) -> list[str]:
    """Check a wave list such as ``["1", "10%", "100%"]`` (cumulative sizes; the last covers all)."""
    out: list[str] = []
    if not waves:
        raise InvalidArgumentError("waves: give at least one wave, e.g. 1,10%,100%")
    for raw in waves:
        w = raw.strip()
        m = _WAVE_RE.match(w)
        if not m or int(m.group(1)) == 0 or (m.group(2) and int(m.group(1)) > 100):
            raise InvalidArgumentError(f"waves: {w!r} is not a device count (1) or a percentage (1%..100%)")
        out.append(w)
    if out[-1] != "100%":
        raise InvalidArgumentError("waves: the last wave must be 100% so every selected device is covered")
    return out


def plan_waves(n: int, waves: Sequence[str]) -> list[int]:
    """The wave index of each of ``n`` devices (in the order given). Waves are cumulative sizes."""
    plan: list[int] = []
    for i, w in enumerate(waves):
        m = _WAVE_RE.match(w)
        if m is None:  # validated before
            raise InvalidArgumentError(f"waves: bad wave {w!r}")
        k = int(m.group(1))
        upto = min(n, math.ceil(n * k / 100) if m.group(2) else k)
        while len(plan) < upto:
            plan.append(i)
    while len(plan) < n:
        plan.append(len(waves) - 1)
    return plan


def _expected(dev: Row | None, now: float, stale_s: float) -> bool:
    """Online, or seen within ``stale_s`` (a controller restart or a network blip: it is expected back)."""
    return bool(dev and now - dev["last_seen"] < stale_s)


FAILED_PREFIX = "failed: "


def _kept_reason(m: Row, then: str) -> str:
    """A member's message on its way back: why it failed (its own gate), kept in front of what happens now,
    so that ``rollout status`` and /metrics still name the gate after the rollback. A member rolled back
    only because its wave aborted has no reason of its own."""
    if m["state"] == "failed" and m["message"]:
        return f"{FAILED_PREFIX}{m['message']}; {then}"
    if m["message"].startswith(FAILED_PREFIX):
        return f"{m['message'].rsplit('; rolling back to ', 1)[0]}; {then}"
    return then


def _serving(dev: Row, model_name: str) -> list[Row]:
    return [p for p in dev["pipelines"] if str(p.get("model_ref", "")).split(":")[0] == model_name]


def _connected(dev: Row, now: float, stale_s: float) -> bool:
    """Its stream is open (on some replica) and it was heard from within ``stale_s``."""
    return bool(dev["online"]) and now - dev["last_seen"] < stale_s


def divergence(ro: Row, dev: Row, *, serving_only: bool = False) -> str:
    """What the device does instead of serving the rollout's version in every pipeline of its model and
    holding it as last-good (``serving_only``: serving it), per its latest report; "" when nothing."""
    target = ro["model_ref"]
    pipes = _serving(dev, ro["model_name"])
    if not pipes:
        return f"serves no {ro['model_name']} model"
    for p in pipes:
        if p.get("model_ref") != target:
            return f"serves {p.get('model_ref')}"
    if serving_only:
        return ""
    for p in pipes:
        if p.get("last_good_ref", "") != target:
            return f"holds {p.get('last_good_ref') or 'no version'} as its last-good"
    return ""


def health_verdict(  # noqa: PLR0911
    ro: Row, dev: Row, swapped_at: float, camera_grace_s: float = DEFAULT_CAMERA_GRACE_S
) -> tuple[bool | None, str]:
    """(True, "") healthy, (False, why) unhealthy, (None, "") no report since ``swapped_at`` yet."""
    if dev["health_at"] <= swapped_at:
        return None, ""
    params = ro["params"]
    pipes = _serving(dev, ro["model_name"])
    if not pipes:
        return False, f"no pipeline serves {ro['model_name']} any more"
    for p in pipes:
        h: Mapping[str, Any] = p.get("health") or {}
        if p.get("model_ref") != ro["model_ref"]:
            return False, f"pipeline {p.get('name')} serves {p.get('model_ref')} instead of {ro['model_ref']}"
        if p.get("state", "running") != "running" or not h.get("healthy", True):
            return False, f"pipeline {p.get('name')} unhealthy: {h.get('detail') or p.get('state')}"
        if params.get("min_fps") and float(h.get("fps", 0.0)) < params["min_fps"]:
            return False, f"pipeline {p.get('name')} at {h.get('fps', 0.0):.1f} fps < {params['min_fps']}"
        if params.get("max_latency_ms") and float(h.get("latency_p95_ms", 0.0)) > params["max_latency_ms"]:
            return False, (
                f"pipeline {p.get('name')} p95 {h.get('latency_p95_ms', 0.0):.1f} ms > {params['max_latency_ms']}"
            )
        worse = quality_verdict(
            params, p, ro["model_ref"], str(dev.get("device_id", ""))
        )  # what it sees vs its own baseline (issue 22)
        if worse:
            return False, worse
    cameras = camera_gate(pipes, params, camera_grace_s)
    if cameras:
        return False, cameras
    return True, ""


def telemetry_verdict(ro: Row, health: Any) -> tuple[bool | None, str]:
    """The same gate on MQTT telemetry since the swap (``TelemetryStore.health``: mean fps, worst p95,
    errors, online). None: no opinion (no sample yet, or the device's telemetry link is offline)."""
    if health is None or not health.samples or not health.online:
        return None, ""
    params = ro["params"]
    n = health.samples
    if params.get("min_fps") and health.fps is not None and health.fps < params["min_fps"]:
        return (
            False,
            f"telemetry: {health.fps:.1f} fps < {params['min_fps']} (mean of {n} samples since the swap)",
        )
    if params.get("max_latency_ms") and health.p95_ms is not None and health.p95_ms > params["max_latency_ms"]:
        return False, f"telemetry: p95 {health.p95_ms:.1f} ms > {params['max_latency_ms']} since the swap"
    if health.errors:
        return (
            False,
            f"telemetry: {health.errors} error(s) since the swap (outages, error or rollback events)",
        )
    return True, ""


class RolloutEngine:
    """Drives every active rollout one step per tick. Several replicas may run one each: a rollout is
    driven only by the replica holding its lease (a row-level compare-and-set in the database)."""

    def __init__(
        self,
        store: Store,
        owner: str,
        *,
        notify: Callable[[str], None],
        tick_s: float = 0.5,
        lease_s: float = 10.0,
        stale_s: float = 30.0,
        telemetry_health: Callable[[str, float], Any] | None = None,
        report_gap_s: float = 17.0,
        max_attempts: int = 5,
        retry_backoff_s: float = 5.0,
        retry_backoff_max_s: float = 300.0,
        reconcile_s: float = 2.0,
        camera_grace_s: float = DEFAULT_CAMERA_GRACE_S,
    ) -> None:
        """``report_gap_s``: a member whose device sends no status report for this long during its window
        is ``unknown``. ``max_attempts``: commands per member and rollout, the first included; re-sends
        after the first wait ``retry_backoff_s`` doubling to ``retry_backoff_max_s``. Every
        ``reconcile_s`` the engine looks for devices off their desired state in rollouts it does not drive
        already (a completed one)."""
        # ``TelemetryStore.health`` when the controller ingests telemetry; called on the database thread
        # (step() runs there), which is what ``health_async`` would do from the event loop.
        self.telemetry_health = telemetry_health
        self.camera_grace_s = camera_grace_s  # the camera gate's grace when a rollout sets none
        self.store = store
        self.owner = owner
        self.notify = notify
        self.tick_s = tick_s
        self.lease_s = lease_s
        self.stale_s = stale_s
        self.report_gap_s = report_gap_s
        self.max_attempts = max(1, max_attempts)
        self.retry_backoff_s = retry_backoff_s
        self.retry_backoff_max_s = retry_backoff_max_s
        self.reconcile_s = reconcile_s
        self._reconciled = -math.inf
        self._resent: list[str] = []  # devices re-sent a command during the current step
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    def _due(self) -> list[str]:
        """The rollouts to step now: every active one, and every ``reconcile_s`` those with a device off
        its desired state (runs on the database thread)."""
        ids = self.store.active_rollouts()
        now = self.store.clock()
        if now - self._reconciled >= self.reconcile_s:
            self._reconciled = now
            ids += [rid for rid in self.store.diverged_rollouts() if rid not in ids]
        return ids

    def tick(self) -> list[str]:
        """One pass of :meth:`run`, synchronously: step every due rollout whose lease this engine holds or
        takes; returns the devices that got a new command."""
        touched: list[str] = []
        for rid in self._due():
            if self.store.acquire_lease(rid, self.owner, self.lease_s):
                touched += self.step(rid)
        return touched

    async def run(self) -> None:
        while True:
            try:
                ids = await self.store.call(self._due)
                for rid in ids:
                    if await self.store.call(self.store.acquire_lease, rid, self.owner, self.lease_s):
                        touched = await self.store.call(self.step, rid)
                        for device_id in touched:
                            self.notify(device_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                _log.exception("rollout engine tick failed; retrying")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.tick_s)

    # --- one step (runs on the database thread) -----------------------------------------------------
    def step(self, rollout_id: str) -> list[str]:
        """Advance one rollout; returns the devices that got a new command."""
        st = self.store
        now = st.clock()
        ro, devs = st.rollout_snapshot(rollout_id)
        self._resent = []
        desired = st.desired_by_command([m["command_id"] for m in ro["devices"] if m["command_id"]])
        window = float(ro["params"].get("health_window_s", 30.0))
        for m in ro["devices"]:
            self._observe(ro, m, desired.get(m["command_id"]), devs.get(m["device_id"]), window, now)
        touched: list[str] = list(self._resent)
        if ro["state"] != "running":
            return touched
        wave = ro["current_wave"]
        members = [m for m in ro["devices"] if m["wave"] == wave]
        sending = [m for m in members if m["state"] == "pending"]
        if sending:
            rows = [apply_command(ro, m["device_id"], m.get("variant_sha", "")) for m in sending]
            st.send_wave(rollout_id, rows)
            for m, row in zip(sending, rows, strict=True):
                m.update(state="applying", command_id=row["command_id"], message="command sent")
                touched.append(m["device_id"])
        failed = [m for m in members if m["state"] == "failed"]
        ratio = float(ro["params"].get("max_failure_ratio", 0.0))
        if failed and len(failed) > ratio * len(members):
            why = f"wave {wave + 1}: {len(failed)} of {len(members)} failed ({failed[0]['message']})"
            _log.warning("rollout %s aborted: %s; rolling the wave back", rollout_id, why)
            touched += self._roll_back(ro, members)
            st.update_rollout(rollout_id, state="aborted", message=why + "; wave rolled back")
            return touched
        blocking = [
            m
            for m in members
            if m["state"] in ("pending", "applying", "health", "unknown")
            and _expected(devs.get(m["device_id"]), now, self.stale_s)
        ]
        if not blocking:
            if wave + 1 >= len(ro["waves"]):
                waiting = sum(1 for m in ro["devices"] if m["state"] not in TERMINAL)
                msg = "all waves done" + (f"; {waiting} offline device(s) converge when they return" if waiting else "")
                st.update_rollout(rollout_id, state="completed", message=msg)
                _log.info("rollout %s completed: %s", rollout_id, msg)
            else:
                st.update_rollout(rollout_id, current_wave=wave + 1, message=f"wave {wave + 1} passed")
                _log.info("rollout %s: wave %d passed, starting wave %d", rollout_id, wave + 1, wave + 2)
                touched += self.step(rollout_id)
        return touched

    def _set(self, ro: Row, m: Row, **values: Any) -> None:
        self.store.update_member(ro["rollout_id"], m["device_id"], **values)
        m.update(values)

    def _observe(self, ro: Row, m: Row, d: Row | None, dev: Row | None, window: float, now: float) -> None:
        """Move one member on from what its desired row and its device say (a few transitions at most:
        a device can apply, crash and report again between two ticks)."""
        for _ in range(3):
            before, command = m["state"], m["command_id"]
            self._observe_once(ro, m, d, dev, window, now)
            if m["state"] == before or m["command_id"] != command:  # settled, or re-sent: ``d`` is stale
                return

    def _observe_once(self, ro: Row, m: Row, d: Row | None, dev: Row | None, window: float, now: float) -> None:
        state = m["state"]
        if state in ("applying", "rolling_back"):
            if d is None:
                self._set(ro, m, state="failed", message="superseded by a newer deployment")
            elif d["state"] == "applied":
                if state == "rolling_back":
                    self._set(ro, m, state="rolled_back", message=_kept_reason(m, f"back on {m['previous_ref']}"))
                else:
                    at = d["done_at"] or now
                    self._set(ro, m, state="health", swapped_at=at, watch_since=at, message="watching health")
            elif d["state"] == "failed":
                prefix = "rollback failed: " if state == "rolling_back" else ""
                self._set(ro, m, state="failed", message=prefix + (d["message"] or "refused"))
        elif dev is None:
            return
        elif state == "health":
            self._watch(ro, m, d, dev, window, now)
        elif state == "unknown":
            if _connected(dev, now, self.stale_s) and dev["health_at"] > max(dev["connected_at"], m["watch_since"]):
                self._resume(ro, m, d, dev, now, "reported again")
        elif state == "succeeded" and d is not None and d["state"] == "applied":
            # it made the version last-good, so it restarts on it: serving another, it lost it
            fresh = dev["health_at"] > max(dev["connected_at"], m["updated_at"])
            if fresh and _connected(dev, now, self.stale_s):
                why = divergence(ro, dev, serving_only=True)
                if why:
                    self._retry(ro, m, d, f"{why} after it had succeeded", now)

    def _watch(self, ro: Row, m: Row, d: Row | None, dev: Row, window: float, now: float) -> None:
        """A member in its health window: connected and reporting throughout, healthy on the new version,
        and the device's own word that the version is its last-good, or it does not succeed."""
        since = m["watch_since"] or m["swapped_at"]
        connected = _connected(dev, now, self.stale_s)
        if dev["connected_at"] > since:  # it reconnected: a crash (or a network cut) inside the window
            if connected and dev["health_at"] > dev["connected_at"]:
                self._resume(ro, m, d, dev, now, "reconnected during its health window")
            else:
                self._unknown(ro, m, now, "disconnected during its health window")
            return
        if not connected:
            self._unknown(ro, m, now, "disconnected during its health window")
            return
        silent = now - max(dev["health_at"], since)
        if silent > self.report_gap_s:
            self._unknown(ro, m, now, f"sent no status report for {silent:.0f} s of its health window")
            return
        ok, why = health_verdict(ro, dev, since, self.camera_grace_s)
        if ok is not False and self.telemetry_health is not None:
            t_ok, t_why = telemetry_verdict(ro, self.telemetry_health(m["device_id"], since))
            if t_ok is False:
                ok, why = False, t_why
            elif ok is None and t_ok:
                ok = True  # fresh telemetry is enough when no status report came since the swap
        if ok is False:
            self._set(ro, m, state="failed", message=why)
        elif ok and now - since >= window:
            if (d is not None and d["last_good_at"] > 0) or not divergence(ro, dev):
                self._set(ro, m, state="succeeded", message=f"serving {ro['model_ref']}, healthy, last-good")
            else:
                wait = f"healthy; waiting for the device to report {ro['model_ref']} as its last-good"
                if m["message"] != wait:
                    self._set(ro, m, message=wait)

    def _unknown(self, ro: Row, m: Row, now: float, why: str) -> None:
        self._set(ro, m, state="unknown", watch_since=now, message=f"device {why}; waiting for it to report")

    def _resume(self, ro: Row, m: Row, d: Row | None, dev: Row, now: float, what: str) -> None:
        """The device reports again after a disconnect or a silence in its window: still serving the
        version, it is watched for a whole new window; back on another (its old last-good after a
        crash), the command is re-sent."""
        pipes = _serving(dev, ro["model_name"])
        if pipes and all(p.get("model_ref") == ro["model_ref"] for p in pipes):
            self._set(ro, m, state="health", watch_since=now, message=f"{what}; watching a new health window")
        else:
            self._retry(ro, m, d, f"{divergence(ro, dev)} ({what})", now)

    def _retry(self, ro: Row, m: Row, d: Row | None, why: str, now: float) -> None:
        """Re-send the member's command under the next attempt's id, or fail it when attempts run out."""
        if d is None:
            self._set(ro, m, state="failed", message="superseded by a newer deployment")
            return
        attempt = int(d["attempt"] or 1)
        if attempt >= self.max_attempts:
            self._set(ro, m, state="failed", message=f"did not converge after {attempt} attempts: device {why}")
            return
        k = attempt + 1
        delay = 0.0 if k == 2 else min(self.retry_backoff_max_s, self.retry_backoff_s * 2 ** (k - 3))
        row = dict(apply_command(ro, m["device_id"], m.get("variant_sha", "")), attempt=k, not_before=now + delay)
        row["command_id"] = f"{row['command_id']}.{k}"
        when = f" in {delay:.0f} s" if delay else ""
        message = f"device {why}; re-sending (attempt {k} of {self.max_attempts}{when})"
        if self.store.resend(ro["rollout_id"], d["command_id"], row, message):
            _log.info("rollout %s: %s %s", ro["rollout_id"], m["device_id"], message)
            m.update(state="applying", command_id=row["command_id"], message=message)
            self._resent.append(m["device_id"])

    def _roll_back(self, ro: Row, members: list[Row]) -> list[str]:
        touched = []
        for m in members:
            if m["state"] == "pending":
                self._set(ro, m, state="skipped", message="not started")
                continue
            needs = m["state"] in ("applying", "health", "unknown", "succeeded") or (
                m["state"] == "failed" and m["swapped_at"] > 0
            )
            if not needs or not m["previous_ref"]:
                continue
            cmd = f"{ro['rollout_id']}.{m['device_id']}.rollback"
            self.store.set_desired(
                {
                    "device_id": m["device_id"],
                    "model_name": ro["model_name"],
                    "kind": "rollback",
                    "sha256": m["previous_sha"],
                    "ref": m["previous_ref"],
                    "command_id": cmd,
                    "rollout_id": ro["rollout_id"],
                    "health_window_s": 0.0,
                }
            )
            message = _kept_reason(m, f"rolling back to {m['previous_ref']}")
            self._set(ro, m, state="rolling_back", command_id=cmd, message=message)
            touched.append(m["device_id"])
        return touched

    def control(self, rollout_id: str, action: str) -> tuple[Row, list[str]]:
        """pause | resume | abort | rollback, as the operator asks (runs on the database thread)."""
        st = self.store
        touched: list[str] = []
        if action == "pause":
            st.require_state(rollout_id, ("running",), action)
            st.update_rollout(rollout_id, "running", state="paused", message="paused by operator")
        elif action == "resume":
            st.require_state(rollout_id, ("paused",), action)
            st.update_rollout(rollout_id, "paused", state="running", message="resumed by operator")
        elif action in ("abort", "rollback"):
            allowed = ("running", "paused") if action == "abort" else ("running", "paused", "completed", "aborted")
            ro = st.require_state(rollout_id, allowed, action)
            if action == "rollback":
                touched = self._roll_back(ro, ro["devices"])
                st.update_rollout(rollout_id, state="rolled_back", message="rolled back by operator")
            else:
                for m in ro["devices"]:
                    if m["state"] == "pending":
                        self._set(ro, m, state="skipped", message="not started")
                st.update_rollout(rollout_id, state="aborted", message="aborted by operator")
        else:
            raise InvalidArgumentError(f"unknown rollout action {action!r}")
        return st.get_rollout(rollout_id), touched
