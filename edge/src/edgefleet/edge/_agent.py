"""The agent: runs the configured pipelines, keeps one Connect stream to the controller (reconnecting
with jittered exponential backoff), executes id-tagged commands exactly once, and reports every step.

Concurrency: the control plane is asyncio (grpc.aio); the SDK pipelines run on their own threads and
every blocking call into them goes through ``asyncio.to_thread``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.json_format import ParseDict

from edgefleet.proto.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from edgefleet.sdk import EdgefleetError, ModelPackage, PipelineConfig, key_id, load_public_key
from edgefleet.sdk.kit import distribution_version

from ._background import background_executor
from ._caps import detect_capabilities
from ._channel_ready import ready_or_stopped
from ._config import AgentConfig
from ._errors import AgentError, ApplyError, DownloadInterruptedError
from ._model_updates import ModelUpdates
from ._modelstore import ModelStore
from ._pipeline_host import PipelineHost
from ._security import controller_channel
from ._specs import SpecRunner
from ._state import AgentState
from ._telemetry import TelemetryAgent, TelemetryError

__all__ = ["Agent", "load_trusted_keys"]

_log = logging.getLogger(__name__)
VERSION = distribution_version("edgefleet-edge")


def load_trusted_keys(paths: tuple[Path, ...]) -> dict[str, Any]:
    keys: dict[str, Any] = {}
    for path in paths:
        key = load_public_key(path)
        keys[key_id(key)] = key
    return keys


class Agent:
    """One device's agent: the composition of its pipelines (``hosts``), its model commands
    (``models``, edgefleet.edge._model_updates), its pipeline spec (``specs``, edgefleet.edge._specs), its
    telemetry, and the Connect session to the controller that feeds them commands."""

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
        self.models = ModelUpdates(self)
        self.status_interval_s = 5.0
        self.connected = asyncio.Event()
        self._out: asyncio.Queue[agent_pb2.AgentMessage | None] | None = None
        self._inflight: set[str] = set()
        self._apply_lock = asyncio.Lock()
        #: bumped by every model or spec command: a health window still running for an older one stands down
        self.generation = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
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
        self.loop = asyncio.get_running_loop()
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
            if not await ready_or_stopped(channel, stop, c.connect_timeout_s, c.address):
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
            try:
                pipes = await asyncio.to_thread(self.pipeline_statuses)
            except Exception:  # one bad report must not silence the device: the controller reads silence as gone
                _log.exception("status report failed; the next one goes in %.1f s", self.status_interval_s)
                await asyncio.sleep(self.status_interval_s)
                continue
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
                            await self.models.apply(stub, cid, cmd.apply, cmd.rollout_id),
                        )
                    elif cmd.WhichOneof("kind") == "spec":
                        ok, (message, ref, watching, last_good) = True, await self.specs.apply(cid, cmd.spec)
                    elif cmd.WhichOneof("kind") == "rollback":
                        ok, message, ref = True, *await self.models.rollback(cid, cmd.rollback, cmd.rollout_id)
                        last_good = True  # rollback() wrote it as last-good before returning
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
