"""The agent's model commands: fetch a version (resumable, rate-limited, verified, installed off the
event loop), hot-swap it into every pipeline serving that model (one version across them: a refusal
rolls the others back), watch its health window and make it last-good, or roll back on order."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from edgefleet.proto.v1 import agent_pb2, common_pb2
from edgefleet.sdk import ModelPackage

from ._errors import ApplyError, ArtifactError, DownloadInterruptedError
from ._fetch import download
from ._modelstore import ModelStore
from ._pipeline_host import PipelineHost
from ._state import AgentState
from ._telemetry import SwapPhase

__all__ = ["ModelUpdates", "shadow_gate"]

_log = logging.getLogger(__name__)
Agent = Any  # edgefleet.edge._agent.Agent, which imports this module (no import circle, not even type-only)
_STEPS = {
    "verify": agent_pb2.STEP_VERIFYING,
    "load": agent_pb2.STEP_LOADING,
    "warmup": agent_pb2.STEP_WARMUP,
    "gate": agent_pb2.STEP_GATE,
    "cutover": agent_pb2.STEP_CUTOVER,
    "health": agent_pb2.STEP_HEALTH,
    "rollback": agent_pb2.STEP_ROLLED_BACK,
    "done": agent_pb2.STEP_HEALTH,
    "failed": agent_pb2.STEP_GATE,
    "shadow": agent_pb2.STEP_GATE,  # the shadow phase is a gate before the cut-over
}


def shadow_gate(apply: agent_pb2.ApplyModel) -> dict[str, Any] | None:
    """``ApplyModel.shadow`` as ``ShadowGate`` fields (0: default or not checked); None: no shadow phase."""
    if not apply.HasField("shadow"):
        return None
    g = apply.shadow
    sampling = {k: v for k, v in (("sample_rate", g.sample_rate), ("max_busy", g.max_busy)) if v > 0}
    gate: dict[str, Any] = {"shadow": sampling}
    if g.phase:
        gate["phase"] = g.phase  # checked by the SDK: an unknown phase refuses the command, saying so
    for key in ("min_frames", "max_s", "min_f1", "max_class_mix_shift", "max_detection_rate_change"):
        value = getattr(g, key)
        if value > 0:
            gate[key] = value
    return gate


class ModelUpdates:
    """Model commands for one agent (``Agent.models``); reads and writes the agent's store, state and
    pipelines, reports through its ``event``."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.store: ModelStore = agent.store
        self.state: AgentState = agent.state

    def progress(self, cid: str) -> Any:
        loop = self.agent.loop

        def cb(stage: str, message: str) -> None:
            if loop is not None:
                loop.call_soon_threadsafe(self.agent.event, cid, _STEPS.get(stage, agent_pb2.STEP_UNSPECIFIED), message)

        return cb

    async def fetch_package(self, stub: Any, cid: str, m: common_pb2.ModelRef) -> ModelPackage:
        root = self.store.installed(m.sha256)
        if root is not None:
            self.store.partial(m.sha256).unlink(missing_ok=True)  # a kill after the install left it
            return self.store.load(root)
        part = self.store.partial(m.sha256)
        have = part.stat().st_size if part.exists() else 0
        self.agent.event(
            cid,
            agent_pb2.STEP_DOWNLOADING,
            f"resuming at {have} of {m.size} bytes" if have else f"{m.size} bytes",
            metrics={"offset": float(have), "size": float(m.size)},
        )
        rate = self.agent.config.download_rate_limit_kbps * 125.0  # kilobits/s -> bytes/s
        for attempt in range(3):
            try:
                await download(
                    stub,
                    sha256=m.sha256,
                    size=m.size,
                    dest=part,
                    device_id=self.agent.config.device_id,
                    rate_limit_bps=rate,
                    executor=self.agent._background,
                )
                break
            except DownloadInterruptedError as exc:
                if attempt == 2:
                    raise
                _log.warning("%s; retrying", exc)
                await asyncio.sleep(1.0 + attempt)
        self.agent.event(cid, agent_pb2.STEP_VERIFYING, "sha256, files and signature")
        try:
            loop = asyncio.get_running_loop()
            pkg = await loop.run_in_executor(self.agent._background, self.store.install, part, m.sha256, m.size)
        except ArtifactError:
            part.unlink(missing_ok=True)  # a bad download is not resumed
            raise
        part.unlink(missing_ok=True)
        self.agent.event(cid, agent_pb2.STEP_INSTALLING, f"installed {pkg.ref}")
        return pkg

    async def apply(
        self, stub: Any, cid: str, apply: agent_pb2.ApplyModel, rollout_id: str = ""
    ) -> tuple[str, str, bool, bool]:
        """Apply ``apply.model``: (message, ref, a health window watches it now, it is last-good now)."""
        m = apply.model
        ref = f"{m.name}:{m.version}"
        hosts = [h for h in self.agent.hosts.values() if h.model_name == m.name]
        if not hosts:
            raise ApplyError(f"no pipeline on {self.agent.config.device_id} serves a model named {m.name}")
        if all(h.ref == ref for h in hosts):
            held = all(self.state.last_good(h.name).get("ref") == ref for h in hosts)
            return f"already serving {ref}" + ("; it is last-good" if held else ""), ref, False, held
        pkg = await self.fetch_package(stub, cid, m)
        if pkg.ref != ref:
            raise ArtifactError(f"artifact {m.sha256[:12]}… holds {pkg.ref}, not {ref}")
        self.state.packages[ref] = {"sha256": m.sha256, "path": str(pkg.root)}
        self.state.save()
        window = (
            self.agent.config.health_window_s
            if self.agent.config.health_window_s is not None
            else apply.health_window_s
        )
        done: list[tuple[PipelineHost, ModelPackage | None]] = []
        for h in hosts:
            before = h.package
            before_ref = before.ref if before else h.ref
            self.agent._swap_event(h.name, SwapPhase.PHASE_STARTED, before_ref, ref, rollout_id=rollout_id)
            t0 = time.perf_counter()
            outcome = await asyncio.to_thread(h.swap, pkg, window, self.progress(cid), shadow_gate(apply))
            took = time.perf_counter() - t0
            kpis = {k: v for k, v in outcome.metrics.items() if k.startswith("shadow_")}
            if kpis:  # the shadow phase's agreement, passed or not, for the controller's record
                self.agent.event(cid, agent_pb2.STEP_GATE, f"{h.name}: shadow agreement of {ref}", metrics=kpis)
            if not outcome.ok:
                why = f"refused at {outcome.stage}: {outcome.error}"
                self.agent._swap_event(
                    h.name,
                    SwapPhase.PHASE_FAILED,
                    before_ref,
                    ref,
                    reason=why,
                    duration_s=took,
                    rollout_id=rollout_id,
                )
                for other, prev in done:  # keep every pipeline on one version
                    if prev is not None:
                        await asyncio.to_thread(other.rollback_to, prev, self.progress(cid))
                        self.agent._swap_event(
                            other.name,
                            SwapPhase.PHASE_ROLLED_BACK,
                            prev.ref,
                            ref,
                            reason=f"pipeline {h.name} refused {ref}",
                            rollout_id=rollout_id,
                        )
                raise ApplyError(
                    f"{ref} refused at {outcome.stage}: {outcome.error}; {before.ref if before else '?'} keeps serving"
                )
            done.append((h, before))
            self.agent._swap_event(
                h.name, SwapPhase.PHASE_SUCCEEDED, before_ref, ref, duration_s=took, rollout_id=rollout_id
            )
        self.agent.generation += 1
        task = asyncio.create_task(self._watch(cid, hosts, pkg, m.sha256, window, self.agent.generation, rollout_id))
        self.agent._tasks.add(task)
        task.add_done_callback(self.agent._tasks.discard)
        return f"serving {ref}" + (f"; watching health for {window:.0f} s" if window else ""), ref, True, False

    async def _watch(
        self,
        cid: str,
        hosts: list[PipelineHost],
        pkg: ModelPackage,
        sha: str,
        window: float,
        generation: int,
        rollout_id: str = "",
    ) -> None:
        """After the health window, the new version becomes last-good; a rollback by the SDK is reported."""
        deadline = time.monotonic() + window
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
            if generation != self.agent.generation:
                self.state.finish_command(cid)  # superseded by a newer command before its window ended
                return
            back = [h for h in hosts if h.ref != pkg.ref]
            if back:
                why = f"{pkg.ref} rolled back during its health window; {back[0].ref} serving"
                self.state.finish_command(cid, False, why)
                self.state.save()
                for h in back:
                    h.follow_rollback()
                for h in back:
                    self.agent._swap_event(
                        h.name,
                        SwapPhase.PHASE_ROLLED_BACK,
                        h.ref,
                        pkg.ref,
                        reason="health gate failed in the health window",
                        rollout_id=rollout_id,
                    )
                self.agent.event(cid, agent_pb2.STEP_ROLLED_BACK, why, model_ref=back[0].ref)
                return
        if generation != self.agent.generation:
            self.state.finish_command(cid)
            return
        for h in hosts:
            old = self.state.serving.get(h.name)
            if old is None and h.previous is not None:
                old = {"ref": h.previous.ref, "sha256": "", "path": str(h.previous.root)}
            if old is not None:
                self.state.previous[h.name] = old
            self.state.serving[h.name] = {"ref": pkg.ref, "sha256": sha, "path": str(pkg.root)}
        self.state.finish_command(cid, last_good=True)
        self.state.save()  # written and fsynced before the device says so
        self.agent.event(
            cid, agent_pb2.STEP_HEALTH, f"{pkg.ref} healthy; now last-good", model_ref=pkg.ref, last_good=True
        )

    async def rollback(self, cid: str, rb: agent_pb2.RollbackModel, rollout_id: str = "") -> tuple[str, str]:
        hosts = [h for h in self.agent.hosts.values() if h.model_name == rb.model_name]
        if not hosts:
            raise ApplyError(f"no pipeline serves a model named {rb.model_name}")
        entry = self.state.packages.get(rb.to_ref)
        if not entry or not entry.get("path"):
            raise ApplyError(f"{rb.to_ref} is not held on this device any more")
        pkg = self.store.load(Path(entry["path"]))
        self.agent.generation += 1
        for h in hosts:
            abandoned = h.ref
            outcome = await asyncio.to_thread(h.rollback_to, pkg, self.progress(cid))
            if not outcome.ok:
                raise ApplyError(f"rollback to {rb.to_ref} failed at {outcome.stage}: {outcome.error}")
            if abandoned != pkg.ref:
                self.agent._swap_event(
                    h.name,
                    SwapPhase.PHASE_ROLLED_BACK,
                    pkg.ref,
                    abandoned,
                    reason="rollback ordered by the controller",
                    rollout_id=rollout_id,
                )
            self.state.serving[h.name] = {
                "ref": pkg.ref,
                "sha256": entry.get("sha256", ""),
                "path": str(pkg.root),
            }
        self.state.save()
        return f"rolled back to {rb.to_ref}", rb.to_ref
