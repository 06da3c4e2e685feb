"""The random-kill harness shared by tests/integration/test_random_kill.py and tools/bench/random_kill.py.

A real controller (``edgefleet controller serve --insecure``) and a real agent (``edgefleet agent``) on
loopback. Each round: the agent runs (restarted if it was killed), a rollout to another signed, padded
package is under way, and the agent is SIGKILLed at a random point of one phase of the update (download,
verify, install, swap, health window), chosen at random. While the agent is dead the harness checks the
model store; when it is back, that it serves a version that verifies.

Store integrity, after every kill:
  * every ``models/<sha256>/`` folder re-verifies (every file's sha256 and the publisher signature against
    the trusted key) and holds the package that was pushed under that sha256; nothing else is in models/;
  * every ``downloads/<sha256>.part`` is a prefix of the artifact the controller holds for that sha256;
  * ``state.json`` parses, and each last-good / previous entry points at a package that verifies.
After every restart: the version the controller sees the agent serving is its last-good from state.json
(or the config's package when there is none yet), and that package verifies.

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
PHASES: dict[str, tuple[str, float]] = {
    "download": ("STEP_DOWNLOADING", 0.6),
    "verify": ("STEP_VERIFYING", 0.12),
    "install": ("STEP_INSTALLING", 0.05),
    "swap": ("STEP_LOADING", 0.25),
    "health": ("STEP_CUTOVER", 0.8),
}
MODEL = "toy-yolo"


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
        health_window_s: float = 1.0,
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
        self.failures: list[str] = []
        self.stats: Counter[str] = Counter()
        self.phases: Counter[str] = Counter()
        self._rollout = ""
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
            "--trusted-key", str(self.pub), "--status-interval", "0.3", "--health-window", "1",
            "--tick", "0.1", "--lease", "3", "--stale", "4",
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
        offset = self._start_agent()
        self.stats["restarts"] += 1
        t0 = time.monotonic()
        got = _wait("the agent back online", self._serving, 60, 0.05)
        self.stats["restart_s_total"] += time.monotonic() - t0  # type: ignore[assignment]
        if got != expected:
            self.failures.append(f"restarted on {got}, expected last-good {expected}")
        elif self._verify(path, expected, "restart"):
            self.stats["restarts_on_verified"] += 1
        return offset

    def _ensure_rollout(self) -> None:
        """Half the time an unfinished rollout is left to resume after the restart; else a new one."""
        if self._rollout and self.rng.random() < 0.5:
            ro = self.client.rollout(self._rollout)
            if ro.state not in ("completed", "aborted", "rolled_back", "cancelled"):
                return
        self._deploy()

    def _deploy(self) -> None:
        serving = self._serving()
        models = self.state_dir / "models"
        held = {self.refs[p.name] for p in models.iterdir() if p.name in self.refs} if models.exists() else set()
        choices = [p for p in self.packages if f"{MODEL}:{p.name}" not in held | {serving}]
        choices = choices or [p for p in self.packages if f"{MODEL}:{p.name}" != serving]
        target = self.rng.choice(choices)
        from edgefleet.cloud import ConflictError

        if self._rollout:
            with contextlib.suppress(ConflictError):  # already over
                self.client.control(self._rollout, "abort")
        ro = self.client.deploy(f"{MODEL}:{target.name}", {"site": "rk"}, ["100%"],
                                health_window_s=self.window)  # fmt: skip
        self._rollout = ro.rollout_id
        self._deployed += 1

    def kill_once(self, offset: int) -> str:
        """Kill the agent at a random point of a randomly chosen phase; returns the phase it was in."""
        want = self.rng.choice(list(PHASES))
        marker, spread = PHASES[want]
        seen_before = self._log_since(offset).count(marker)
        nudge, deadline = time.monotonic() + 3.0, time.monotonic() + 10.0
        phase = f"none (waited for {want})"
        while time.monotonic() < deadline:
            if nudge and time.monotonic() > nudge:  # nothing under way: a new rollout (supersedes)
                self._deploy()
                nudge = 0.0
            if self._log_since(offset).count(marker) > seen_before:
                time.sleep(self.rng.uniform(0.0, spread))
                phase = want
                break
            time.sleep(0.005)
        assert self.agent is not None
        self.agent.send_signal(signal.SIGKILL)
        self.agent.wait(10)
        self.agent = None
        self.phases[phase] += 1
        return phase

    def run(self, kills: int) -> dict[str, Any]:
        t0 = time.monotonic()
        self.setup()
        offset = self.restart()
        for i in range(kills):
            self._ensure_rollout()
            phase = self.kill_once(offset)
            self.stats["kills"] += 1
            self.check_store()
            self._evict_cold()
            offset = self.restart()
            self.say(f"kill {i + 1}/{kills} in {phase}: {len(self.failures)} failure(s)")
        staging = self.state_dir / "staging"
        leftovers = list(staging.iterdir()) if staging.exists() else []
        return {
            "kills": self.stats["kills"],
            "kills_by_phase": dict(self.phases),
            "restarts": self.stats["restarts"],
            "restarts_on_verified_version": self.stats["restarts_on_verified"],
            "store_integrity_checks": self.stats["integrity_checks"],
            "store_integrity_ok": self.stats["integrity_ok"],
            "rollouts_started": self._deployed,
            "downloads_resumed": self.agent_log.read_text(errors="replace").count("resuming at"),
            "staging_leftovers_after_restart": len(leftovers),
            "failures": self.failures,
            "mean_restart_s": round(self.stats["restart_s_total"] / max(1, self.stats["restarts"]), 3),
            "elapsed_s": round(time.monotonic() - t0, 1),
            "padding_bytes": self.padding,
            "download_rate_limit_kbps": self.rate,
        }
