"""The agent: runs the configured pipelines, keeps one Connect stream to the controller (reconnecting
with jittered exponential backoff), executes id-tagged commands exactly once, and reports every step.

Concurrency: the control plane is asyncio (grpc.aio); the SDK pipelines run on their own threads and
every blocking call into them goes through ``asyncio.to_thread``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.json_format import ParseDict

from edgefleet.proto.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from edgefleet.sdk import EdgefleetError, ModelPackage, PipelineConfig, key_id, load_public_key
from edgefleet.sdk.kit import can_probe, connect_problem, distribution_version

from ._background import background_executor
from ._caps import detect_capabilities
from ._config import AgentConfig
from ._errors import AgentError, ApplyError, ArtifactError, DownloadInterruptedError
from ._fetch import download
from ._modelstore import ModelStore
from ._pipeline_host import PipelineHost
from ._security import controller_channel
from ._specs import SpecRunner
from ._state import AgentState
from ._telemetry import SwapPhase, TelemetryAgent, TelemetryError

__all__ = ["Agent", "load_trusted_keys"]

_log = logging.getLogger(__name__)
VERSION = distribution_version("edgefleet-edge")
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


def load_trusted_keys(paths: tuple[Path, ...]) -> dict[str, Any]:
    keys: dict[str, Any] = {}
    for path in paths:
        key = load_public_key(path)
        keys[key_id(key)] = key
    return keys


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        try:
            keys = load_trusted_keys(config.trusted_keys)
        except EdgefleetError as exc:
            raise AgentError(str(exc)) from None
        if config.require_signature and not keys:
            raise AgentError("trusted_keys is empty: give the publisher public keys, or require_signature: false")
        self.store = ModelStore(
            config.state_dir,
            keys,
            require_signature=config.require_signature,
            revoked_keys=config.revoked_keys,
        )
        self.state = AgentState(config.state_dir / "state.json")
        self.hosts: dict[str, PipelineHost] = {}
        self.specs = SpecRunner(self)
        self.status_interval_s = 5.0
        self.connected = asyncio.Event()
        self._out: asyncio.Queue[agent_pb2.AgentMessage | None] | None = None
        self._inflight: set[str] = set()
        self._apply_lock = asyncio.Lock()
        self._generation = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._caps = detect_capabilities(VERSION)
        self._background = background_executor(config.install_nice)  # downloads' writes, verify, install
        self.telemetry: TelemetryAgent | None = None
        if config.telemetry is not None:
            try:
                config.telemetry.broker_address()  # a bad URL or TLS file fails here, not in a thread
            except TelemetryError as exc:
                raise AgentError(f"telemetry: {exc}") from None
            self.telemetry = TelemetryAgent(config.telemetry, agent_version=VERSION, labels=config.labels)

    # --- pipelines ---------------------------------------------------------------------------------
    def start_pipelines(self) -> None:
        """Start every pipeline on its last-good version (or the config's package on first boot)."""
        from_spec = self.specs.startup()  # a pipeline spec from the controller wins over agent.yaml
        for name, pc in (from_spec or self.config.pipelines).items():
            host = PipelineHost(name, pc if from_spec else self._with_events(pc), services=self._services())
            pkg: ModelPackage | None = None
            last = self.state.serving.get(name)
            if last:
                try:
                    pkg = self.store.load(Path(last["path"]))
                except AgentError as exc:
                    _log.error(
                        "pipeline %s: last-good %s unusable (%s); using the config's model",
                        name,
                        last.get("ref"),
                        exc,
                    )
                    self._report_error(f"pipeline {name}", f"last-good {last.get('ref')} unusable: {exc}")
            if pkg is None:
                pkg = self.specs.package_for(str(pc.model)) if from_spec else self.store.load(pc.model)
            host.start(pkg)
            self.hosts[name] = host
            if self.telemetry is not None:
                self.telemetry.add_pipeline(name, host.telemetry_stats)
            entry = self.state.packages.setdefault(pkg.ref, {"sha256": (last or {}).get("sha256", ""), "path": ""})
            entry["path"] = str(pkg.root)
            prev = self.state.previous.get(name)
            if prev and prev.get("path"):
                with contextlib.suppress(AgentError):
                    host.previous = self.store.load(Path(prev["path"]))
        self.state.save()

    def close_pipelines(self) -> None:
        for name, host in self.hosts.items():
            if self.telemetry is not None:
                self.telemetry.remove_pipeline(name)
            host.close()

    # --- telemetry (all no-ops without a ``telemetry:`` section; never fails the caller) -----------
    def _services(self) -> dict[str, Any]:
        """What the agent offers its pipelines' sinks: the telemetry the ``events`` sink publishes through."""
        return {} if self.telemetry is None else {"telemetry": self.telemetry}

    def _with_events(self, config: PipelineConfig) -> PipelineConfig:
        """Detection events on (``telemetry.events.detections``), or analytics stages in the pipeline (their
        events and counts): the pipeline gets the ``events`` sink (edgefleet.edge._telemetry._events)
        unless its config lists one."""
        tel = self.telemetry
        wanted = tel is not None and (tel.config.events.detections or bool(config.analytics))
        if tel is None or not wanted or any(s.type == "events" for s in config.sinks):
            return config
        return config.model_validate({**config.model_dump(), "sinks": [*config.sinks, {"type": "events"}]})

    def _swap_event(self, pipeline: str, phase: Any, from_ref: str, to_ref: str, **kw: Any) -> None:
        if self.telemetry is not None:
            try:
                self.telemetry.swap(pipeline, phase, from_ref, to_ref, **kw)
            except TelemetryError as exc:
                _log.warning("swap event not published: %s", exc)

    def _report_error(self, component: str, message: str) -> None:
        if self.telemetry is not None:
            try:
                self.telemetry.error(component, message)
            except TelemetryError as exc:
                _log.warning("error event not published: %s", exc)

    def pipeline_statuses(self) -> list[dict[str, Any]]:
        """Each pipeline's status, with the version it serves and its last-good as written on disk."""
        out = []
        for name, host in self.hosts.items():
            st = host.status()
            st["model_sha256"] = (
                (self.state.serving.get(name) or {}).get("sha256", "")
                if ((self.state.serving.get(name) or {}).get("ref") == st["model_ref"])
                else self.state.packages.get(st["model_ref"], {}).get("sha256", "")
            )
            st["spec_ref"] = self.specs.spec_ref_of(name)
            out.append(st)
        self._stamp_last_good(out)
        row = self.specs.status_row()
        if row is not None:
            out.append(row)
        return out

    def _stamp_last_good(self, statuses: list[dict[str, Any]]) -> None:
        """Each pipeline's last-good as written on disk. Called again on the event loop right before a
        report is sent: a report taken on a worker thread must not arrive after the "now last-good" event
        and still name the version before."""
        for st in statuses:
            if st["name"].startswith("spec/"):
                continue  # a pipeline spec's own row carries the spec's last-good (edgefleet.edge._specs)
            last_good = self.state.last_good(st["name"])
            st["last_good_ref"] = last_good.get("ref", "")
            st["last_good_sha256"] = last_good.get("sha256", "")

    # --- the connection ----------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Connect, serve commands, reconnect on failure, until ``stop`` is set."""
        self._loop = asyncio.get_running_loop()
        c = self.config.controller
        failures = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                await self._session(stop)
            except grpc.aio.AioRpcError as exc:
                _log.warning("controller %s: %s (%s)", c.address, exc.code().name, exc.details())
            except (OSError, TimeoutError) as exc:
                why = str(exc) or (
                    f"no answer within {c.connect_timeout_s:g} s" if isinstance(exc, TimeoutError) else repr(exc)
                )
                _log.warning("controller %s: %s", c.address, why)
            finally:
                self._out = None
                self.connected.clear()
            if stop.is_set():
                break
            failures = 0 if time.monotonic() - started > 60 else failures + 1
            delay = random.uniform(0, min(c.backoff_max_s, c.backoff_initial_s * 2 ** min(failures, 16)))
            _log.info("reconnecting in %.1f s", delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._background.shutdown(wait=False, cancel_futures=True)

    def _hello(self) -> agent_pb2.AgentMessage:
        caps = ParseDict(self._caps, common_pb2.Capabilities())
        pipes = [ParseDict(p, common_pb2.PipelineStatus()) for p in self.pipeline_statuses()]
        return agent_pb2.AgentMessage(
            hello=agent_pb2.Hello(
                device_id=self.config.device_id,
                labels=self.config.labels,
                capabilities=caps,
                pipelines=pipes,
                agent_version=VERSION,
            )
        )

    async def _session(self, stop: asyncio.Event) -> None:
        c = self.config.controller
        options = [
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.max_receive_message_length", 4 << 20),
            ("grpc.max_send_message_length", 4 << 20),
        ]
        async with controller_channel(c, options) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)  # type: ignore[no-untyped-call]
            if not await _ready_or_stopped(channel, stop, c.connect_timeout_s, c.address):
                return  # stopped while connecting: SIGTERM used to wait out the connect timeout
            out: asyncio.Queue[agent_pb2.AgentMessage | None] = asyncio.Queue(maxsize=1000)
            hello = self._hello()

            async def requests() -> AsyncIterator[agent_pb2.AgentMessage]:
                yield hello
                while (msg := await out.get()) is not None:  # None: the session is over
                    yield msg

            call = stub.Connect(requests(), timeout=c.stream_max_s)
            stopper = asyncio.create_task(stop.wait())
            stopper.add_done_callback(lambda _t: call.cancel())
            status_task: asyncio.Task[None] | None = None
            try:
                async for msg in call:
                    kind = msg.WhichOneof("body")
                    if kind == "welcome":
                        self.status_interval_s = msg.welcome.status_interval_s or 5.0
                        self._out = out
                        self.connected.set()
                        _log.info("connected to controller %s at %s", msg.welcome.controller_id, c.address)
                        status_task = asyncio.create_task(self._report_status(stub))
                    elif kind == "command":
                        self._on_command(stub, msg.command)
            except asyncio.CancelledError:
                if not stop.is_set():
                    raise
            finally:
                stopper.cancel()
                if status_task is not None:
                    status_task.cancel()
                # End the request stream before the channel closes: otherwise gRPC's task feeding it stays
                # blocked on the queue and asyncio reports it destroyed when a stream was refused.
                self._out = None
                while True:
                    try:
                        out.put_nowait(None)
                        break
                    except asyncio.QueueFull:
                        out.get_nowait()
                call.cancel()
                await asyncio.sleep(0.01)

    def _send(self, msg: agent_pb2.AgentMessage) -> None:
        q = self._out
        if q is None:
            return  # offline: the outcome is kept in the state and repeated when the command comes again
        with contextlib.suppress(asyncio.QueueFull):
            q.put_nowait(msg)

    async def _report_status(self, stub: Any) -> None:
        while True:
            epoch = self.specs.epoch
            pipes = await asyncio.to_thread(self.pipeline_statuses)
            if epoch != self.specs.epoch:  # a pipeline spec was applied meanwhile: this report is stale
                continue
            self._stamp_last_good(pipes)
            healthy = all(p["health"].get("healthy", False) for p in pipes)
            self._send(
                agent_pb2.AgentMessage(
                    status=agent_pb2.StatusReport(
                        pipelines=[ParseDict(p, common_pb2.PipelineStatus()) for p in pipes],
                        health=common_pb2.Health(
                            fps=sum(p["health"].get("fps", 0.0) for p in pipes),
                            latency_p95_ms=max((p["health"].get("latency_p95_ms", 0.0) for p in pipes), default=0.0),
                            healthy=healthy,
                        ),
                        sent_at=time.time(),
                    )
                )
            )
            await asyncio.sleep(self.status_interval_s)

    def event(
        self,
        command_id: str,
        step: Any,
        message: str = "",
        *,
        done: bool = False,
        ok: bool = False,
        duplicate: bool = False,
        model_ref: str = "",
        metrics: dict[str, float] | None = None,
        last_good: bool = False,
    ) -> None:
        _log.info("command %s: %s %s", command_id, agent_pb2.Step.Name(step), message)
        self._send(
            agent_pb2.AgentMessage(
                event=agent_pb2.CommandEvent(
                    command_id=command_id,
                    step=step,
                    done=done,
                    ok=ok,
                    message=message,
                    duplicate=duplicate,
                    at=time.time(),
                    model_ref=model_ref,
                    metrics=metrics or {},
                    last_good=last_good,
                )
            )
        )

    # --- commands ----------------------------------------------------------------------------------
    def _on_command(self, stub: Any, cmd: agent_pb2.Command) -> None:
        cid = cmd.command_id
        seen = self.state.commands.get(cid)
        if seen is not None:
            self.event(
                cid,
                agent_pb2.STEP_DONE,
                seen["message"],
                done=True,
                ok=seen["ok"],
                duplicate=True,
                model_ref=seen.get("model_ref", ""),
                last_good=bool(seen.get("last_good")),
            )
            return
        if cid in self._inflight:
            self.event(cid, agent_pb2.STEP_RECEIVED, "already in progress", duplicate=True)
            return
        self._inflight.add(cid)
        task = asyncio.create_task(self._execute(stub, cmd))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, stub: Any, cmd: agent_pb2.Command) -> None:
        cid = cmd.command_id
        try:
            async with self._apply_lock:
                self.event(cid, agent_pb2.STEP_RECEIVED, cmd.WhichOneof("kind") or "")
                watching = last_good = False
                try:
                    if cmd.WhichOneof("kind") == "apply":
                        ok, (message, ref, watching, last_good) = (
                            True,
                            await self._apply(stub, cid, cmd.apply, cmd.rollout_id),
                        )
                    elif cmd.WhichOneof("kind") == "spec":
                        ok, (message, ref, watching, last_good) = True, await self.specs.apply(cid, cmd.spec)
                    elif cmd.WhichOneof("kind") == "rollback":
                        ok, message, ref = True, *await self._rollback(cid, cmd.rollback, cmd.rollout_id)
                        last_good = True  # _rollback wrote it as last-good before returning
                    else:
                        raise ApplyError("unknown command kind (is the agent older than the controller?)")
                except DownloadInterruptedError as exc:
                    # not an outcome: the command runs again when the controller repeats it
                    self.event(cid, agent_pb2.STEP_DOWNLOADING, f"{exc}; will resume")
                    return
                except EdgefleetError as exc:  # AgentError too
                    ok, message, ref = False, str(exc), self._serving_ref(cmd)
                    _log.warning("command %s refused: %s", cid, message)
                    self._report_error("command", f"{cid}: {message}")
                # provisional while its health window runs: a restart in the window drops it (state.py)
                self.state.record_command(cid, ok, message, ref, provisional=watching, last_good=last_good)
                self.event(cid, agent_pb2.STEP_DONE, message, done=True, ok=ok, model_ref=ref, last_good=last_good)
        finally:
            self._inflight.discard(cid)

    def _serving_ref(self, cmd: agent_pb2.Command) -> str:
        if cmd.WhichOneof("kind") == "spec":
            return "spec/" + self.specs.ref(self.specs.current) if self.specs.current else ""
        name = cmd.apply.model.name if cmd.WhichOneof("kind") == "apply" else cmd.rollback.model_name
        return next((h.ref for h in self.hosts.values() if h.model_name == name), "")

    def _progress(self, cid: str) -> Any:
        loop = self._loop

        def cb(stage: str, message: str) -> None:
            if loop is not None:
                loop.call_soon_threadsafe(self.event, cid, _STEPS.get(stage, agent_pb2.STEP_UNSPECIFIED), message)

        return cb

    async def _fetch_package(self, stub: Any, cid: str, m: common_pb2.ModelRef) -> ModelPackage:
        root = self.store.installed(m.sha256)
        if root is not None:
            self.store.partial(m.sha256).unlink(missing_ok=True)  # a kill after the install left it
            return self.store.load(root)
        part = self.store.partial(m.sha256)
        have = part.stat().st_size if part.exists() else 0
        self.event(
            cid,
            agent_pb2.STEP_DOWNLOADING,
            f"resuming at {have} of {m.size} bytes" if have else f"{m.size} bytes",
            metrics={"offset": float(have), "size": float(m.size)},
        )
        rate = self.config.download_rate_limit_kbps * 125.0  # kilobits/s -> bytes/s
        for attempt in range(3):
            try:
                await download(
                    stub,
                    sha256=m.sha256,
                    size=m.size,
                    dest=part,
                    device_id=self.config.device_id,
                    rate_limit_bps=rate,
                    executor=self._background,
                )
                break
            except DownloadInterruptedError as exc:
                if attempt == 2:
                    raise
                _log.warning("%s; retrying", exc)
                await asyncio.sleep(1.0 + attempt)
        self.event(cid, agent_pb2.STEP_VERIFYING, "sha256, files and signature")
        try:
            loop = asyncio.get_running_loop()
            pkg = await loop.run_in_executor(self._background, self.store.install, part, m.sha256, m.size)
        except ArtifactError:
            part.unlink(missing_ok=True)  # a bad download is not resumed
            raise
        part.unlink(missing_ok=True)
        self.event(cid, agent_pb2.STEP_INSTALLING, f"installed {pkg.ref}")
        return pkg

    async def _apply(
        self, stub: Any, cid: str, apply: agent_pb2.ApplyModel, rollout_id: str = ""
    ) -> tuple[str, str, bool, bool]:
        """Apply ``apply.model``: (message, ref, a health window watches it now, it is last-good now)."""
        m = apply.model
        ref = f"{m.name}:{m.version}"
        hosts = [h for h in self.hosts.values() if h.model_name == m.name]
        if not hosts:
            raise ApplyError(f"no pipeline on {self.config.device_id} serves a model named {m.name}")
        if all(h.ref == ref for h in hosts):
            held = all(self.state.last_good(h.name).get("ref") == ref for h in hosts)
            return f"already serving {ref}" + ("; it is last-good" if held else ""), ref, False, held
        pkg = await self._fetch_package(stub, cid, m)
        if pkg.ref != ref:
            raise ArtifactError(f"artifact {m.sha256[:12]}… holds {pkg.ref}, not {ref}")
        self.state.packages[ref] = {"sha256": m.sha256, "path": str(pkg.root)}
        self.state.save()
        window = self.config.health_window_s if self.config.health_window_s is not None else apply.health_window_s
        done: list[tuple[PipelineHost, ModelPackage | None]] = []
        for h in hosts:
            before = h.package
            before_ref = before.ref if before else h.ref
            self._swap_event(h.name, SwapPhase.PHASE_STARTED, before_ref, ref, rollout_id=rollout_id)
            t0 = time.perf_counter()
            outcome = await asyncio.to_thread(h.swap, pkg, window, self._progress(cid), shadow_gate(apply))
            took = time.perf_counter() - t0
            kpis = {k: v for k, v in outcome.metrics.items() if k.startswith("shadow_")}
            if kpis:  # the shadow phase's agreement, passed or not, for the controller's record
                self.event(cid, agent_pb2.STEP_GATE, f"{h.name}: shadow agreement of {ref}", metrics=kpis)
            if not outcome.ok:
                why = f"refused at {outcome.stage}: {outcome.error}"
                self._swap_event(
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
                        await asyncio.to_thread(other.rollback_to, prev, self._progress(cid))
                        self._swap_event(
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
            self._swap_event(h.name, SwapPhase.PHASE_SUCCEEDED, before_ref, ref, duration_s=took, rollout_id=rollout_id)
        self._generation += 1
        task = asyncio.create_task(self._watch(cid, hosts, pkg, m.sha256, window, self._generation, rollout_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return f"serving {ref}" + (f"; watching health for {window:.0f} s" if window else ""), ref, True, False

    def _finish(self, cid: str, ok: bool | None = None, message: str = "", *, last_good: bool = False) -> None:
        """An apply's health window is over: its outcome is final (``ok`` None: keep the recorded one).
        The caller saves the state."""
        entry = self.state.commands.get(cid)
        if entry is None:
            return
        entry.pop("provisional", None)
        if ok is not None:
            entry.update(ok=ok, message=message)
        if last_good:
            entry["last_good"] = True

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
            if generation != self._generation:
                self._finish(cid)  # superseded by a newer command before its window ended
                return
            back = [h for h in hosts if h.ref != pkg.ref]
            if back:
                why = f"{pkg.ref} rolled back during its health window; {back[0].ref} serving"
                self._finish(cid, False, why)
                self.state.save()
                for h in back:
                    h.follow_rollback()
                for h in back:
                    self._swap_event(
                        h.name,
                        SwapPhase.PHASE_ROLLED_BACK,
                        h.ref,
                        pkg.ref,
                        reason="health gate failed in the health window",
                        rollout_id=rollout_id,
                    )
                self.event(cid, agent_pb2.STEP_ROLLED_BACK, why, model_ref=back[0].ref)
                return
        if generation != self._generation:
            self._finish(cid)
            return
        for h in hosts:
            old = self.state.serving.get(h.name)
            if old is None and h.previous is not None:
                old = {"ref": h.previous.ref, "sha256": "", "path": str(h.previous.root)}
            if old is not None:
                self.state.previous[h.name] = old
            self.state.serving[h.name] = {"ref": pkg.ref, "sha256": sha, "path": str(pkg.root)}
        self._finish(cid, last_good=True)
        self.state.save()  # written and fsynced before the device says so
        self.event(cid, agent_pb2.STEP_HEALTH, f"{pkg.ref} healthy; now last-good", model_ref=pkg.ref, last_good=True)

    async def _rollback(self, cid: str, rb: agent_pb2.RollbackModel, rollout_id: str = "") -> tuple[str, str]:
        hosts = [h for h in self.hosts.values() if h.model_name == rb.model_name]
        if not hosts:
            raise ApplyError(f"no pipeline serves a model named {rb.model_name}")
        entry = self.state.packages.get(rb.to_ref)
        if not entry or not entry.get("path"):
            raise ApplyError(f"{rb.to_ref} is not held on this device any more")
        pkg = self.store.load(Path(entry["path"]))
        self._generation += 1
        for h in hosts:
            abandoned = h.ref
            outcome = await asyncio.to_thread(h.rollback_to, pkg, self._progress(cid))
            if not outcome.ok:
                raise ApplyError(f"rollback to {rb.to_ref} failed at {outcome.stage}: {outcome.error}")
            if abandoned != pkg.ref:
                self._swap_event(
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


async def _ready_or_stopped(channel: Any, stop: asyncio.Event, timeout_s: float, address: str) -> bool:
    """True once the channel is ready; False when ``stop`` is set first. Raises ConnectionError, saying
    why, as soon as the channel fails and the address refuses connections or does not resolve; otherwise
    TimeoutError after ``timeout_s``."""
    ready = asyncio.ensure_future(_until_ready(channel, timeout_s, address))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({ready, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in (ready, stopped):
            f.cancel()
    if stopped in done:
        if ready.done() and not ready.cancelled():
            ready.exception()  # retrieved: stopping wins
        return False
    ready.result()  # raises ConnectionError / TimeoutError
    return True


async def _until_ready(channel: Any, timeout_s: float, address: str) -> None:
    """Wait for the channel to become ready. gRPC only says "unavailable" (it keeps retrying inside the
    channel), so the first time the channel fails, a direct connection attempt tells a refused port or an
    unresolvable name, which are worth reporting at once, from trouble above TCP (TLS), which is not."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    state = channel.get_state(try_to_connect=True)
    probed: str | None = None  # "" once a probe found nothing wrong below gRPC
    while state is not grpc.ChannelConnectivity.READY:
        if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE and probed is None:
            probed = await _connect_problem(address, deadline - loop.time())
            if probed:
                raise ConnectionError(probed)
        change = asyncio.ensure_future(channel.wait_for_state_change(state))
        try:
            done, _ = await asyncio.wait({change}, timeout=max(0.0, deadline - loop.time()))
        finally:
            change.cancel()
        if not done:
            break
        state = channel.get_state(try_to_connect=True)
    else:
        return
    if probed is None:  # still connecting at the deadline: a silent host, or a slow handshake
        probed = await _connect_problem(address, 2.0)
        if probed:
            raise ConnectionError(probed)
    if can_probe(address):
        raise TimeoutError(
            f"no answer within {timeout_s:g} s: the address takes connections but no gRPC session came up "
            "(TLS settings, or not an edgefleet controller there?)"
        )
    raise TimeoutError(f"no answer within {timeout_s:g} s")


async def _connect_problem(address: str, budget_s: float) -> str:
    """sdk ``connect_problem`` off the event loop, bounded (a name lookup has no timeout of its own);
    "" when nothing is wrong below gRPC or nothing could be learnt in time. It runs on a daemon thread of
    its own, not the loop's executor: ``asyncio.run`` joins that executor at exit, so a hung lookup would
    hold up the agent's shutdown."""
    timeout = min(2.0, max(0.5, budget_s))
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str | None] = loop.create_future()

    def settle(value: str | None) -> None:
        if not answer.done():
            answer.set_result(value)

    def probe() -> None:
        try:
            value = connect_problem(address, timeout)
        except Exception:  # a probe that breaks only loses the better message
            _log.debug("connect probe failed", exc_info=True)
            value = None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, value)

    threading.Thread(target=probe, name="connect-probe", daemon=True).start()
    try:
        return await asyncio.wait_for(answer, timeout + 1.0) or ""
    except asyncio.TimeoutError:  # not the builtin on Python 3.10
        return ""
