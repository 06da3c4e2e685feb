"""The random-kill harness shared by tests/integration/test_random_kill.py and tools/bench/random_kill.py.

A real controller (``edgefleet controller serve --insecure``) and a real agent (``edgefleet agent``) on
loopback. Each round: the agent runs (restarted if it was killed), a rollout to another signed, padded
package is under way, and the agent is SIGKILLed at a random point of one phase of the update (download,
verify, install, swap, inside the health window, at the end of the health window — when state.json is
written), chosen at random; after a kill inside the window the agent stays dead, half the time, until the
controller's window for it is over. While the agent is dead the harness checks the model store; when it
is back, that it serves a version that verifies.

Convergence: a rollout is never abandoned for a new one. Every rollout the harness starts is followed to
its end, through as many kills as land in it; when it is over it must have converged: ``completed`` with
the device serving its version AND holding it as last-good (in state.json and in the device's report),
or ``aborted`` with a reason. A ``completed`` rollout with the device on another version is a failure.

Store integrity, after every kill:
  * every ``models/<sha256>/`` folder re-verifies (every file's sha256 and the publisher signature against
    the trusted key) and holds the package that was pushed under that sha256; nothing else is in models/;
  * every ``downloads/<sha256>.part`` is a prefix of the artifact the controller holds for that sha256;
  * ``state.json`` parses, and each last-good / previous entry points at a package that verifies.
After every restart: the version the controller sees the agent serving is its last-good from state.json
(or the config's package when there is none yet), and that package verifies; no ``.part`` of an
installed artifact is left in downloads/.

While the agent is dead, installed packages that are neither last-good nor previous are evicted, so that
later rounds download and install again instead of finding the package in the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))
# the marker in the agent's log that opens each phase, and how long after it the kill may land (s)
# (marker, earliest, latest): the kill lands uniformly in [earliest, latest] s after the marker; a None
# bound is the health window's length (the agent logs STEP_DONE when the swapped version serves and its
# window starts; at the end of the window it writes state.json and logs the STEP_HEALTH event).
PHASES: dict[str, tuple[str, float | None, float | None]] = {
    "download": ("STEP_DOWNLOADING", 0.0, 0.6),
    "verify": ("STEP_VERIFYING", 0.0, 0.12),
    "install": ("STEP_INSTALLING", 0.0, 0.05),
    "swap": ("STEP_LOADING", 0.0, 0.25),
    "health": ("STEP_DONE serving", 0.1, None),  # inside the health window, deliberately
    "window_end": ("STEP_DONE serving", None, None),  # around the state.json write that ends it
}
WEIGHTS = {"download": 1, "verify": 1, "install": 1, "swap": 1, "health": 2, "window_end": 1}
MODEL = "toy-yolo"
TERMINAL = ("completed", "aborted", "rolled_back")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, fn: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as exc:  # the other side may be restarting
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def _trusted(pub: Path) -> dict[str, Any]:
    from cryptography.hazmat.primitives import serialization

    from edgefleet.sdk import load_public_key

    key = load_public_key(pub)
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {hashlib.sha256(raw).hexdigest()[:16]: key}


class RandomKill:
    def __init__(
        self,
        root: Path,
        *,
        seed: int = 0,
        versions: int = 4,
        padding_bytes: int = 3_000_000,
        rate_limit_kbps: float = 32000.0,  # 4000 kB/s
        health_window_s: float = 2.0,
        settle_s: float = 90.0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.n_versions = versions
        self.padding = padding_bytes
        self.rate = rate_limit_kbps
        self.window = health_window_s
        self.say = say or (lambda _m: None)
        self.address = f"127.0.0.1:{_free_port()}"
        self.controller: subprocess.Popen[bytes] | None = None
        self.agent: subprocess.Popen[bytes] | None = None
        self.state_dir = root / "agent"
        self.agent_log = root / "agent.log"
        self.refs: dict[str, str] = {}  # sha256 -> ref pushed under it
        self.settle_s = settle_s
        self.failures: list[str] = []
        self.stats: Counter[str] = Counter()
        self.phases: Counter[str] = Counter()
        self.outcomes: list[dict[str, Any]] = []  # one per rollout, when it ended
        self._rollout = ""
        self._target = ""
        self._stale_parts: list[Path] = []
        self._deployed = 0

    # --- set-up ----------------------------------------------------------------------------------
    def setup(self) -> None:
        from edgefleet.cloud import FleetClient
        from edgefleet.sdk import generate_signing_key
        from tests.support.onnx_models import yolo_package

        keys = self.root / "keys"
        keys.mkdir(parents=True)
        self.key, self.pub = keys / "pub.pem", keys / "pub.pub.pem"
        generate_signing_key(self.key, self.pub)
        self.trusted = _trusted(self.pub)
        pkgs = self.root / "pkgs"
        self.base = yolo_package(pkgs / "1.0.0", version="1.0.0")
        self.packages: list[Path] = []
        for i in range(self.n_versions):
            d = pkgs / f"{i + 2}.0.0"
            d.mkdir(parents=True)
            (d / "padding.bin").write_bytes(os.urandom(self.padding))
            self.packages.append(yolo_package(d, version=f"{i + 2}.0.0"))
        args = [
            EDGEFLEET, "controller", "serve", "--insecure", "--db", f"sqlite:///{self.root}/controller.db",
            "--listen", self.address, "--data-dir", str(self.root / "controller"),
            "--trusted-key", str(self.pub), "--status-interval", "0.3", "--health-window", str(self.window),
            "--tick", "0.1", "--lease", "3", "--stale", "8", "--retry-backoff", "0.5",
        ]  # fmt: skip
        with (self.root / "controller.log").open("ab") as f:
            self.controller = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        self.client = FleetClient(self.address, timeout_s=10)
        _wait("the controller", lambda: self.client.list_models() is not None, 30, 0.2)
        for p in [self.base, *self.packages]:
            m = self.client.push(p, key=self.key).model
            self.refs[m.sha256] = f"{m.name}:{m.version}"
        cfg = {
            "device_id": "rk1",
            "labels": {"site": "rk"},
            "controller": {"address": self.address, "backoff_initial_s": 0.1, "backoff_max_s": 0.5},
            "trusted_keys": [str(self.pub)],
            "state_dir": str(self.state_dir),
            "download_rate_limit_kbps": self.rate,
            "pipelines": {"cam": {"model": str(self.base), "sources": ["synthetic:?width=96&height=96&fps=10"]}},
        }
        self.config = self.root / "agent.yaml"
        self.config.write_text(yaml.safe_dump(cfg))

    def close(self) -> None:
        for p in (self.agent, self.controller):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        with contextlib.suppress(AttributeError):
            self.client.close()

    # --- the agent -------------------------------------------------------------------------------
    def _start_agent(self) -> int:
        offset = self.agent_log.stat().st_size if self.agent_log.exists() else 0
        with self.agent_log.open("ab") as f:
            self.agent = subprocess.Popen(
                [EDGEFLEET, "agent", "--config", str(self.config)],
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return offset

    def _log_since(self, offset: int) -> str:
        with self.agent_log.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def _serving(self) -> str:
        dev = self.client.get_device("rk1")
        if not dev.online or not dev.pipelines:
            return ""
        return str(dev.pipelines[0].model_ref)

    def _state(self) -> dict[str, Any]:
        path = self.state_dir / "state.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def _verify(self, path: Path, ref: str, what: str) -> bool:
        from edgefleet.sdk import load_package

        signed = path.is_relative_to(self.state_dir)  # the config's own package is trusted as local
        try:
            pkg = load_package(path, trusted_keys=self.trusted if signed else None, require_signature=signed)
        except Exception as exc:
            self.failures.append(f"{what}: {path} does not verify: {exc}")
            return False
        if pkg.ref != ref:
            self.failures.append(f"{what}: {path} holds {pkg.ref}, not {ref}")
            return False
        return True

    def check_store(self) -> None:
        """The agent is dead: everything on disk is consistent."""
        self.stats["integrity_checks"] += 1
        before = len(self.failures)
        models = self.state_dir / "models"
        for folder in sorted(models.iterdir()) if models.exists() else []:
            ref = self.refs.get(folder.name)
            if ref is None:
                self.failures.append(f"models/{folder.name}: not a pushed sha256")
                continue
            roots = [p.parent for p in folder.rglob("manifest.yaml")]
            if len(roots) != 1:
                self.failures.append(f"models/{folder.name}: {len(roots)} manifests")
                continue
            self._verify(roots[0], ref, "store")
        downloads = self.state_dir / "downloads"
        for part in sorted(downloads.iterdir()) if downloads.exists() else []:
            sha = part.name.removesuffix(".part")
            blob = self.root / "controller" / "artifacts" / sha[:2] / sha
            if sha not in self.refs or not blob.exists():
                self.failures.append(f"downloads/{part.name}: unknown artifact")
                continue
            have = part.read_bytes()
            with blob.open("rb") as f:
                if f.read(len(have)) != have:
                    self.failures.append(f"downloads/{part.name}: not a prefix of the artifact")
        try:
            state = self._state()
        except ValueError as exc:
            self.failures.append(f"state.json unreadable: {exc}")
            state = {}
        for kind in ("serving", "previous"):
            for name, entry in (state.get(kind) or {}).items():
                path = Path(entry.get("path", ""))
                if path.is_relative_to(models):
                    self._verify(path, entry["ref"], f"state {kind}.{name}")
        if len(self.failures) == before:
            self.stats["integrity_ok"] += 1

    def _evict_cold(self) -> None:
        state = self._state()
        keep = {Path(e["path"]).relative_to(self.state_dir / "models").parts[0]
                for kind in ("serving", "previous") for e in (state.get(kind) or {}).values()
                if Path(e.get("path", "")).is_relative_to(self.state_dir / "models")}  # fmt: skip
        models = self.state_dir / "models"
        for folder in models.iterdir() if models.exists() else []:
            if folder.name not in keep:
                shutil.rmtree(folder)

    def _expected_ref(self) -> tuple[str, Path]:
        entry = (self._state().get("serving") or {}).get("cam")
        if entry:
            return entry["ref"], Path(entry["path"])
        return f"{MODEL}:1.0.0", self.base

    def restart(self) -> int:
        """Start the agent and check it comes back on a verified version; returns the log offset."""
        expected, path = self._expected_ref()
        models = self.state_dir / "models"  # a kill between an install and the removal of its download
        self._stale_parts = [p for p in (self.state_dir / "downloads").glob("*.part")
                             if (models / p.name.removesuffix(".part")).is_dir()]  # fmt: skip
        offset = self._start_agent()
        self.stats["restarts"] += 1
        t0 = time.monotonic()
        got = _wait("the agent back online", self._serving, 60, 0.05)
        self.stats["restart_s_total"] += time.monotonic() - t0  # type: ignore[assignment]
        if got != expected:
            self.failures.append(f"restarted on {got}, expected last-good {expected}")
        elif self._verify(path, expected, "restart"):
            self.stats["restarts_on_verified"] += 1
        for part in self._stale_parts:  # what the kill left; the agent's own later downloads are its business
            if part.exists():
                self.failures.append(f"after the restart: downloads/{part.name} of an installed artifact is left")
            else:
                self.stats["stale_parts_removed"] += 1
        self._stale_parts = []
        return offset

    def _ensure_rollout(self) -> None:
        """A rollout under way: the current one until it is over (its end checked), then a new one."""
        if self._rollout and self.client.rollout(self._rollout).state not in TERMINAL:
            return
        self.settle()
        self._deploy()

    def _deploy(self) -> None:
        serving = self._serving()
        models = self.state_dir / "models"
        held = {self.refs[p.name] for p in models.iterdir() if p.name in self.refs} if models.exists() else set()
        choices = [p for p in self.packages if f"{MODEL}:{p.name}" not in held | {serving}]
        choices = choices or [p for p in self.packages if f"{MODEL}:{p.name}" != serving]
        target = self.rng.choice(choices)
        ro = self.client.deploy(f"{MODEL}:{target.name}", {"site": "rk"}, ["100%"],
                                health_window_s=self.window)  # fmt: skip
        self._rollout, self._target = ro.rollout_id, f"{MODEL}:{target.name}"
        self._deployed += 1

    def settle(self) -> None:
        """Wait for the current rollout to end, then check that it converged (or says why not)."""
        if not self._rollout:
            return
        rid, target = self._rollout, self._target
        try:
            ro = _wait(f"rollout {rid} to end", lambda: (r := self.client.rollout(rid)).state in TERMINAL and r,
                       self.settle_s, 0.1)  # fmt: skip
        except TimeoutError:
            ro = self.client.rollout(rid)
            members = [(m.state, m.message) for m in ro.devices]
            self.failures.append(f"rollout {rid} ({target}) did not end within {self.settle_s:.0f} s: {members}")
            self.outcomes.append({"rollout": rid, "to": target, "state": ro.state, "converged": False})
            return
        member = ro.devices[0]
        outcome = {"rollout": rid, "to": target, "state": ro.state, "member": member.state,
                   "attempts": _attempt(member.command_id), "message": ro.message or member.message}  # fmt: skip
        if ro.state == "completed":

            def have() -> tuple[str, str, str]:
                dev = self.client.get_device("rk1")
                pipe = dev.pipelines[0] if dev.pipelines else None
                on_disk = (self._state().get("serving") or {}).get("cam", {}).get("ref", "")
                return (pipe.model_ref if pipe else "", pipe.last_good_ref if pipe else "", on_disk)

            with contextlib.suppress(TimeoutError):  # the next status report (0.3 s) names the new last-good
                _wait("the device's report", lambda: have() == (target, target, target), 5, 0.1)
            seen = have()
            outcome["converged"] = member.state == "succeeded" and seen == (target, target, target)
            if not outcome["converged"]:
                self.failures.append(
                    f"rollout {rid} completed ({member.state}: {member.message}) but the device serves {seen[0]}, "
                    f"reports last-good {seen[1]} and state.json says {seen[2]}, not {target}"
                )
        else:  # aborted: it must say why
            outcome["converged"] = False
            if not (ro.message and member.message):
                self.failures.append(f"rollout {rid} ended {ro.state} without a reason: {ro.message!r}")
        self.outcomes.append(outcome)

    def kill_once(self, offset: int) -> tuple[str, bool]:
        """Kill the agent at a random point of a randomly chosen phase; returns the phase it was in and
        whether it was inside the health window."""
        want = self.rng.choices(list(PHASES), [WEIGHTS[k] for k in PHASES])[0]
        marker, low, high = PHASES[want]
        w = self.window
        low = w - 0.15 if low is None and want == "window_end" else (low or 0.0)
        high = w + 0.15 if want == "window_end" else (w - 0.3 if high is None else high)
        seen_before = self._log_since(offset).count(marker)
        nudge, deadline = time.monotonic() + 3.0, time.monotonic() + 12.0
        phase = f"none (waited for {want})"
        while time.monotonic() < deadline:
            if nudge and time.monotonic() > nudge:  # nothing under way: the rollout is over, start the next
                self._ensure_rollout()
                nudge = time.monotonic() + 3.0
            if self._log_since(offset).count(marker) > seen_before:
                time.sleep(self.rng.uniform(low, max(low, high)))
                phase = want
                break
            time.sleep(0.005)
        assert self.agent is not None
        self.agent.send_signal(signal.SIGKILL)
        self.agent.wait(10)
        self.agent = None
        self.phases[phase] += 1
        return phase, phase in ("health", "window_end")

    def run(self, kills: int) -> dict[str, Any]:
        t0 = time.monotonic()
        self.setup()
        offset = self.restart()
        for i in range(kills):
            self._ensure_rollout()
            phase, in_window = self.kill_once(offset)
            self.stats["kills"] += 1
            self.check_store()
            self._evict_cold()
            if in_window and self.rng.random() < 0.5:  # back only after the controller's window is over
                time.sleep(self.window + 1.0)
                self.stats["late_restarts"] += 1
            offset = self.restart()
            self.say(f"kill {i + 1}/{kills} in {phase}: {len(self.failures)} failure(s)")
        self.settle()
        staging = self.state_dir / "staging"
        leftovers = list(staging.iterdir()) if staging.exists() else []
        ended = Counter(o["state"] for o in self.outcomes)
        return {
            "kills": self.stats["kills"],
            "kills_by_phase": dict(self.phases),
            "kills_in_health_window": self.phases["health"] + self.phases["window_end"],
            "restarts_after_the_controllers_window": self.stats["late_restarts"],
            "restarts": self.stats["restarts"],
            "restarts_on_verified_version": self.stats["restarts_on_verified"],
            "store_integrity_checks": self.stats["integrity_checks"],
            "store_integrity_ok": self.stats["integrity_ok"],
            "rollouts_started": self._deployed,
            "rollouts_ended": dict(ended),
            "rollouts_completed_and_converged": sum(1 for o in self.outcomes if o.get("converged")),
            "rollouts_completed_not_converged": sum(
                1 for o in self.outcomes if o["state"] == "completed" and not o.get("converged")
            ),
            "rollouts_aborted_with_reason": sum(
                1 for o in self.outcomes if o["state"] != "completed" and o.get("message")
            ),
            "versions_deployed": len({o["to"] for o in self.outcomes}),
            "commands_resent": (self.root / "controller.log").read_text(errors="replace").count("re-sending (attempt"),
            "outcomes": self.outcomes,
            "downloads_resumed": self.agent_log.read_text(errors="replace").count("resuming at"),
            "staging_leftovers_after_restart": len(leftovers),
            "complete_downloads_left_by_a_kill_removed_at_restart": self.stats["stale_parts_removed"],
            "failures": self.failures,
            "mean_restart_s": round(self.stats["restart_s_total"] / max(1, self.stats["restarts"]), 3),
            "elapsed_s": round(time.monotonic() - t0, 1),
            "padding_bytes": self.padding,
            "download_rate_limit_kbps": self.rate,
            "health_window_s": self.window,
        }


def _attempt(command_id: str) -> int:
    """The attempt number in a command id: ``<rollout>.<device>.apply`` is 1, ``….apply.3`` is 3."""
    last = command_id.rsplit(".", 1)[-1]
    return int(last) if last.isdigit() else 1
