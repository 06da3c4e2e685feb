"""The agent's pipeline spec: the pipelines the controller wants this device to run (a versioned
document, ``edgefleet.sdk._spec``), applied in place, watched, and kept as the last-good spec.

Which wins: a device that has received a spec runs the spec's pipelines (its last-good one after a
restart); the ``pipelines`` of agent.yaml are what it runs until the first spec arrives, and the package
of the model each names is where a spec's pipeline finds its model when the device holds no other
version of that name.

Applying a spec: pipelines in both the old and the new spec change in place (``PipelineHost.reconfigure``:
cameras, sinks and analytics added, removed and replaced live; other changes restart that pipeline only),
new ones start, gone ones stop. ``${secret:<name>}`` references are filled with secrets sealed to this
device (opened with the private key of its mTLS certificate) in memory only; ``state_dir/spec.json`` keeps
the sealed bytes, never the clear values. Relative ``path`` fields of a spec's sources and sinks are
relative to ``state_dir``.

The gate: the spec's own status row (``spec/<name>``) is unhealthy while a pipeline of it has failed or a
stream has not connected ``connect_timeout_s`` after the spec was applied (a camera that never answers);
the rollout engine fails the device on it and rolls the wave back. After the health window (and at least
the connect timeout) the spec becomes last-good, written before the device says so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from edgefleet.proto.v1 import agent_pb2
from edgefleet.sdk import EdgefleetError, ModelPackage, PipelineConfig
from edgefleet.sdk.kit import PipelineSpec, load_pipeline_spec, plan_live_change, redact, resolve_secrets

from ._errors import AgentError, ApplyError
from ._pipeline_host import PipelineHost

Agent = Any  # edgefleet.edge._agent.Agent, which imports this module (no import circle, not even type-only)

__all__ = ["SpecRunner"]

_log = logging.getLogger(__name__)
PREFIX = "spec/"


class SpecRunner:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.path = agent.config.state_dir / "spec.json"
        self.current: dict[str, Any] | None = None  # {name, version, sha256, document, sealed}
        self.last_good: dict[str, Any] | None = None
        self.spec: PipelineSpec | None = None
        self.applied_at = 0.0
        self.changed: dict[str, float] = {}  # stream id -> when the spec added or changed it
        #: bumped when an apply starts and when it ends: a status report computed across one is stale (it
        #: could reach the controller after the command's DONE and be read as the new spec's health)
        self.epoch = 0
        self._load()

    # --- state on disk ---------------------------------------------------------------------------------
    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.last_good = data.get("last_good") or None
        except FileNotFoundError:
            return
        except (OSError, ValueError, AttributeError) as exc:
            _log.error("pipeline spec state %s unreadable (%s); starting from agent.yaml", self.path, exc)
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path.with_suffix(".corrupt"))

    def _save(self) -> None:
        data = {"last_good": self.last_good, "current": self.current}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".spec-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @staticmethod
    def ref(entry: dict[str, Any] | None) -> str:
        return f"{entry['name']}:{entry['version']}" if entry else ""

    # --- building pipelines ----------------------------------------------------------------------------
    def _parse(self, entry: dict[str, Any]) -> PipelineSpec:
        return load_pipeline_spec(self._with_paths(json.loads(entry["document"])), f"pipeline spec {self.ref(entry)}")

    def _with_paths(self, doc: dict[str, Any]) -> dict[str, Any]:
        base = self.agent.config.state_dir
        for pipe in (doc.get("pipelines") or {}).values():
            for key in ("sources", "sinks"):
                pipe[key] = [
                    {**item, "path": str(base / item["path"])}
                    if isinstance(item, dict)
                    and isinstance(item.get("path"), str)
                    and not Path(item["path"]).is_absolute()
                    else item
                    for item in pipe.get(key) or []
                ]
        return doc

    def _secrets(self, entry: dict[str, Any]) -> dict[str, str]:
        sealed = {k: base64.b64decode(v) for k, v in (entry.get("sealed") or {}).items()}
        if not sealed:
            return {}
        tls = self.agent.config.controller.tls
        if tls is None:
            raise ApplyError("sealed secrets need controller.tls: they open with this device's certificate key")
        try:
            key = tls.key.read_bytes()
        except OSError as exc:
            raise ApplyError(f"controller.tls.key: cannot read: {exc.strerror}") from None
        from edgefleet.sdk.kit import SealingError, unseal  # cryptography's ECDH: only when a spec has secrets

        device = self.agent.config.device_id
        try:
            return {name: unseal(key, device, name, blob).decode() for name, blob in sealed.items()}
        except (SealingError, UnicodeDecodeError) as exc:
            raise ApplyError(str(exc)) from None

    def configs(self, entry: dict[str, Any]) -> dict[str, PipelineConfig]:
        """The device's pipeline configs of a spec entry: secrets filled, paths resolved, events sink."""
        spec = self._parse(entry)
        secrets = self._secrets(entry)
        try:
            return {n: self.agent._with_events(resolve_secrets(c, secrets)) for n, c in spec.pipelines.items()}
        except EdgefleetError as exc:
            raise ApplyError(str(exc)) from None

    def package_for(self, model_name: str) -> ModelPackage:
        """The package a spec's pipeline serving ``model_name`` starts on: what a running pipeline of that
        name serves, else its newest last-good, else the one agent.yaml names."""
        agent = self.agent
        hosts: dict[str, PipelineHost] = agent.hosts
        for host in hosts.values():
            if host.model_name == model_name and host.package is not None:
                return host.package
        for entry in agent.state.serving.values():
            if entry.get("ref", "").split(":")[0] == model_name and entry.get("path"):
                with contextlib.suppress(AgentError):
                    held: ModelPackage = agent.store.load(Path(entry["path"]))
                    return held
        for pc in agent.config.pipelines.values():
            with contextlib.suppress(AgentError):
                pkg: ModelPackage = agent.store.load(pc.model)
                if pkg.name == model_name:
                    return pkg
        raise ApplyError(f"this device holds no package of model {model_name} (deploy one first)")

    def startup(self) -> dict[str, PipelineConfig] | None:
        """The pipelines to start with: the last-good spec's, or None (agent.yaml's)."""
        if self.last_good is None:
            return None
        try:
            configs = self.configs(self.last_good)
        except (AgentError, EdgefleetError) as exc:
            _log.error("last-good pipeline spec %s unusable (%s); running agent.yaml", self.ref(self.last_good), exc)
            return None
        self.current, self.spec = self.last_good, self._parse(self.last_good)
        self.applied_at = time.monotonic()
        _log.info("running pipeline spec %s (last-good)", self.ref(self.current))
        return configs

    # --- applying --------------------------------------------------------------------------------------
    async def apply(self, cid: str, msg: agent_pb2.ApplyPipelineSpec) -> tuple[str, str, bool, bool]:
        """Apply a spec command: (message, ref, a window watches it now, it is last-good now)."""
        entry = {
            "name": msg.name,
            "version": int(msg.version),
            "sha256": msg.sha256,
            "document": msg.document,
            "sealed": {k: base64.b64encode(v).decode() for k, v in msg.sealed_secrets.items()},
        }
        ref = PREFIX + self.ref(entry)
        if hashlib.sha256(msg.document.encode()).hexdigest() != msg.sha256:
            raise ApplyError(f"pipeline spec {self.ref(entry)}: the document does not match its sha256")
        spec = self._parse(entry)
        if spec.name != msg.name or spec.version != msg.version:
            raise ApplyError(
                f"pipeline spec {self.ref(entry)}: the document does not match its name, version or sha256"
            )
        if (
            self.current is not None
            and self.current["sha256"] == msg.sha256
            and self.current.get("sealed") == entry["sealed"]
        ):
            held = self.last_good is not None and self.last_good["sha256"] == msg.sha256
            return f"already running {self.ref(entry)}" + ("; it is last-good" if held else ""), ref, False, held
        configs = self.configs(entry)
        self.epoch += 1
        try:
            lines = await asyncio.to_thread(self._apply_configs, spec, configs)
        finally:
            self.current, self.spec = entry, spec  # what runs now, also when an apply failed part way
            self.epoch += 1
        self._save()
        summary = f"running {self.ref(entry)}: " + ("; ".join(lines) or "no change")
        if msg.rollback:
            self.last_good = entry
            self._save()
            return f"rolled back to {self.ref(entry)}: " + ("; ".join(lines) or "no change"), ref, False, True
        window = max(float(msg.health_window_s), spec.connect_timeout_s)
        self.agent.generation += 1
        task = asyncio.create_task(self._watch(cid, entry, window, self.agent.generation))
        self.agent._tasks.add(task)
        task.add_done_callback(self.agent._tasks.discard)
        return summary + f"; watching for {window:.0f} s", ref, True, False

    def _apply_configs(self, spec: PipelineSpec, configs: dict[str, PipelineConfig]) -> list[str]:
        agent = self.agent
        lines: list[str] = []
        now = time.monotonic()
        self.applied_at = now
        models = {name: str(spec.pipelines[name].model) for name in configs}
        # packages first, while the pipelines that go away still hold theirs
        new_pkgs = {n: self.package_for(m) for n, m in models.items() if n not in agent.hosts}
        for name in [n for n in agent.hosts if n not in configs]:
            gone = agent.hosts.pop(name)
            if agent.telemetry is not None:
                agent.telemetry.remove_pipeline(name)
            gone.close()
            lines.append(f"- pipeline {name}")
        for name, config in configs.items():
            existing = agent.hosts.get(name)
            if existing is None:
                host = PipelineHost(name, config, services=agent._services())
                try:
                    host.start(new_pkgs[name])
                except EdgefleetError as exc:
                    raise ApplyError(f"pipeline {name}: {exc}") from None
                agent.hosts[name] = host
                if agent.telemetry is not None:
                    agent.telemetry.add_pipeline(name, host.telemetry_stats)
                self.changed.update(dict.fromkeys(_stream_ids(config), now))
                lines.append(f"+ pipeline {name}")
                continue
            pkg = self.package_for(models[name]) if existing.model_name != models[name] else None
            touched = plan_live_change(existing.config, config).touched_streams
            try:
                done = existing.reconfigure(config, pkg)
            except EdgefleetError as exc:
                raise ApplyError(f"pipeline {name}: {exc}") from None
            self.changed.update(dict.fromkeys(touched, now))
            lines += [f"{name}: {line}" for line in done]
        return lines

    async def _watch(self, cid: str, entry: dict[str, Any], window: float, generation: int) -> None:
        agent = self.agent
        deadline = time.monotonic() + window
        while time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            if generation != agent.generation or self.current is not entry:
                agent.state.finish_command(cid)
                return
        row = await asyncio.to_thread(self.status_row)
        if generation != agent.generation or self.current is not entry:
            agent.state.finish_command(cid)
            return
        if row is None or not row["health"]["healthy"]:
            why = row["health"]["detail"] if row else "not running"
            agent.state.finish_command(cid, False, f"{self.ref(entry)} unhealthy at the end of its window: {why}")
            agent.state.save()
            return
        self.last_good = entry
        self._save()  # written and fsynced before the device says so
        agent.state.finish_command(cid, last_good=True)
        agent.state.save()
        agent.event(
            cid,
            agent_pb2.STEP_HEALTH,
            f"{self.ref(entry)} healthy; now last-good",
            model_ref=PREFIX + self.ref(entry),
            last_good=True,
        )

    # --- status ----------------------------------------------------------------------------------------
    def status_row(self) -> dict[str, Any] | None:
        """The spec's own PipelineStatus row: its version, last-good and health as a whole."""
        entry, spec = self.current, self.spec
        if entry is None or spec is None:
            return None
        problems: list[str] = []
        fps = p95 = 0.0
        now = time.monotonic()
        for name in spec.pipelines:
            host = self.agent.hosts.get(name)
            p = host.pipeline if host is not None else None
            if p is None:
                problems.append(f"pipeline {name} is not running")
                continue
            if p.error is not None:
                problems.append(f"pipeline {name} failed: {redact(str(p.error))}")
                continue
            stats = p.stats()
            fps += stats.fps
            for sid, st in stats.streams.items():
                p95 = max(p95, st.latency_p95_ms)
                if st.failed:
                    problems.append(f"stream {sid} failed: {st.last_error or 'error'}")
                elif not st.connected and not st.finished:
                    since = max(self.changed.get(sid, 0.0), self.applied_at)
                    waited = now - since
                    if waited >= spec.connect_timeout_s:
                        problems.append(
                            f"stream {sid} not connected {waited:.0f} s after the spec: {st.last_error or 'no frames'}"
                        )
        good = self.last_good
        return {
            "name": PREFIX + entry["name"],
            "model_ref": PREFIX + self.ref(entry),
            "model_sha256": entry["sha256"],
            "state": "running" if not problems else "failed",
            "health": {"fps": fps, "latency_p95_ms": p95, "healthy": not problems, "detail": "; ".join(problems)},
            "last_good_ref": PREFIX + self.ref(good) if good and good["name"] == entry["name"] else "",
            "last_good_sha256": good["sha256"] if good and good["name"] == entry["name"] else "",
            "spec_ref": self.ref(entry),
        }

    def spec_ref_of(self, pipeline: str) -> str:
        return self.ref(self.current) if self.spec is not None and pipeline in self.spec.pipelines else ""


def _stream_ids(config: PipelineConfig) -> list[str]:
    from edgefleet.sdk.kit import stream_id

    return [str(stream_id(item, i)) for i, item in enumerate(config.sources)]
