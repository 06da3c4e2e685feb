"""AgentService: the agents' Connect streams and artifact downloads."""
# ruff: noqa: N802  (gRPC method names are the RPC names)

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from edgefleet.proto.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from edgefleet.sdk.kit import NAME_RE as _DEVICE_RE

from ._artifact_store import SHA256_RE, ArtifactStore
from ._auth import current_peer
from ._convert import msg_dict
from ._errors import DatabaseError
from ._fleet_store import Row, Store
from ._settings import ControllerSettings
from ._shadow_gates import shadow_pb
from ._spec_commands import SpecCommands
from ._spec_store import SPEC_PREFIX
from ._status_writer import StatusWriter

__all__ = ["AgentHub", "AgentServicer"]

_log = logging.getLogger(__name__)
CHUNK = 256 * 1024


def _step_name(step: int) -> str:
    """An agent newer than the controller may send a step this build does not know: named by number."""
    try:
        name: str = agent_pb2.Step.Name(step)
    except ValueError:
        return f"step {step}"
    return name.removeprefix("STEP_").lower()


@dataclass
class _Conn:
    device_id: str
    conn_id: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sent: dict[str, float] = field(default_factory=dict)  # command id -> when sent
    closed: bool = False


class AgentHub:
    """The agent streams this replica holds, by device id."""

    def __init__(self) -> None:
        self.conns: dict[str, _Conn] = {}

    def notify(self, device_id: str) -> None:
        c = self.conns.get(device_id)
        if c is not None:
            c.wake.set()

    def connected(self) -> list[str]:
        return list(self.conns)


def command_pb(d: Row, model: Row | None, params: Mapping[str, Any] | None = None) -> agent_pb2.ControllerMessage:
    """The command for desired row ``d``; ``params``: its rollout's (the shadow gates ride along)."""
    cmd = agent_pb2.Command(command_id=d["command_id"], rollout_id=d["rollout_id"])
    if d["kind"] == "rollback":
        cmd.rollback.CopyFrom(agent_pb2.RollbackModel(model_name=d["model_name"], to_ref=d["ref"]))
    else:
        name, _, version = d["ref"].partition(":")
        cmd.apply.CopyFrom(
            agent_pb2.ApplyModel(
                model=common_pb2.ModelRef(
                    name=name, version=version, sha256=d["sha256"], size=model["size"] if model else 0
                ),
                health_window_s=d["health_window_s"],
            )
        )
        shadow = shadow_pb(params or {})
        if shadow is not None:
            cmd.apply.shadow.CopyFrom(shadow)
    return agent_pb2.ControllerMessage(command=cmd)


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(
        self,
        store: Store,
        artifacts: ArtifactStore,
        hub: AgentHub,
        settings: ControllerSettings,
        on_event: Any,
        status_writer: StatusWriter,
    ) -> None:
        """Status reports go through ``status_writer`` (batched writes)."""
        self.store = store
        self.artifacts = artifacts
        self.hub = hub
        self.settings = settings
        self.on_event = on_event
        self.status_writer = status_writer
        self.specs = SpecCommands(store)

    async def Connect(
        self,
        request_iterator: AsyncIterator[agent_pb2.AgentMessage],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[agent_pb2.ControllerMessage]:
        try:
            async for msg in self._connect(request_iterator, context):
                yield msg
        except DatabaseError as exc:
            _log.warning("agent stream ended: %s", exc)
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))

    async def _connect(
        self,
        request_iterator: AsyncIterator[agent_pb2.AgentMessage],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[agent_pb2.ControllerMessage]:
        it = request_iterator.__aiter__()
        try:
            first = await asyncio.wait_for(it.__anext__(), self.settings.hello_timeout_s)
        except TimeoutError:  # a slow-loris client holds a stream without saying who it is
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no Hello within {self.settings.hello_timeout_s:g} s of opening the stream",
            )
            return
        except StopAsyncIteration:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the stream ended before its Hello")
            return
        if first.WhichOneof("body") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be a Hello")
        hello = first.hello
        if not _DEVICE_RE.match(hello.device_id):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "device_id must match [a-z0-9][a-z0-9._-]{0,63}")
        peer = current_peer.get()
        if peer is not None and hello.device_id != peer.name:
            # the certificate is the identity; a Hello naming another device is an impersonation attempt
            _log.warning("certificate of %s sent a Hello as %s; refused", peer.name, hello.device_id)
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"this certificate identifies device {peer.name}; it cannot connect as {hello.device_id}",
            )
        device_id = hello.device_id
        conn = _Conn(device_id, f"{self.settings.replica_id}#{secrets.token_hex(4)}")
        old = self.hub.conns.get(device_id)
        if old is not None:  # the agent reconnected before we noticed the old stream die
            old.closed = True
            old.wake.set()
        self.hub.conns[device_id] = conn
        await self.store.call(
            self.store.hello,
            device_id,
            dict(hello.labels),
            msg_dict(hello.capabilities),
            [msg_dict(p) for p in hello.pipelines],
            conn.conn_id,
        )
        if peer is not None:  # what camera secrets are sealed to: the key of the certificate it proved it holds
            await self.specs.remember_key(device_id, context)
        _log.info("agent %s connected (%s)", device_id, context.peer())
        joined = await self.store.call(self.store.join_rollouts, device_id)
        if joined:
            _log.info("agent %s joins rollout(s) %s: its labels match", device_id, ", ".join(joined))
            self.on_event()  # the engine sends running rollouts' commands; a completed one's is pending now
        reader = asyncio.create_task(self._read(it, conn))
        waiter: asyncio.Task[Any] | None = None
        try:
            yield agent_pb2.ControllerMessage(
                welcome=agent_pb2.Welcome(
                    controller_id=self.settings.replica_id, status_interval_s=self.settings.status_interval_s
                )
            )
            while not conn.closed and not reader.done():
                for d in await self.store.call(self.store.pending_commands, device_id):
                    last = conn.sent.get(d["command_id"])
                    if last is not None and time.monotonic() - last < self.settings.resend_s:
                        continue
                    if str(d["model_name"]).startswith(SPEC_PREFIX):
                        out = await self.specs.command(d, device_id)
                    else:
                        model = await self.store.call(self.store.model_by_sha, d["sha256"]) if d["sha256"] else None
                        params = None
                        if d["kind"] == "apply" and d["rollout_id"]:
                            params = await self.store.call(self.store.rollout_params, d["rollout_id"])
                        out = command_pb(d, model, params)
                    conn.sent[d["command_id"]] = time.monotonic()
                    _log.info("→ %s command %s (%s %s)", device_id, d["command_id"], d["kind"], d["ref"])
                    yield out
                conn.wake.clear()
                waiter = asyncio.create_task(conn.wake.wait())
                await asyncio.wait(
                    {waiter, reader}, timeout=self.settings.resend_s / 2, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
        finally:
            if waiter is not None:  # the stream can end (a client's deadline) during the wait above
                waiter.cancel()
            reader.cancel()
            if self.hub.conns.get(device_id) is conn:
                del self.hub.conns[device_id]
                await asyncio.shield(self.store.call(self.store.disconnect, device_id, conn.conn_id))
            _log.info("agent %s disconnected", device_id)

    async def _read(self, it: AsyncIterator[agent_pb2.AgentMessage], conn: _Conn) -> None:
        try:
            async for msg in it:
                kind = msg.WhichOneof("body")
                if kind == "hello":  # a second one is ignored: the identity is fixed by the first
                    _log.warning("agent %s sent a second Hello on its stream; ignored", conn.device_id)
                    continue
                if kind == "status":
                    _finite(msg.status.health, *(p.health for p in msg.status.pipelines))
                    pipelines = [msg_dict(p) for p in msg.status.pipelines]
                    self.status_writer.submit(conn.device_id, pipelines, msg_dict(msg.status.health))
                elif kind == "event":
                    ev = msg.event
                    step = _step_name(ev.step)
                    text = f"{ev.command_id}: {step}" + (f": {ev.message}" if ev.message else "")
                    if ev.duplicate:
                        text += " (duplicate)"
                    _log.info("← %s %s", conn.device_id, text)
                    await self.store.call(
                        self.store.event, conn.device_id, ev.command_id, ev.done, ev.ok, text, last_good=ev.last_good
                    )
                    if ev.done or ev.last_good:
                        self.on_event()
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError:
            pass
        except DatabaseError as exc:
            _log.warning("agent %s: %s; closing its stream", conn.device_id, exc)
        finally:
            conn.closed = True
            conn.wake.set()

    async def FetchArtifact(
        self, request: agent_pb2.FetchArtifactRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[agent_pb2.ArtifactChunk]:
        if not SHA256_RE.match(request.sha256):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "sha256 must be 64 lowercase hex digits")
        peer = current_peer.get()
        if peer is not None and request.device_id and request.device_id != peer.name:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"this certificate identifies device {peer.name}, not {request.device_id}",
            )
        try:
            row = await self.store.call(self.store.model_by_sha, request.sha256)
        except DatabaseError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            return
        path = self.artifacts.path(request.sha256)
        if row is None or not path.is_file():
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no artifact {request.sha256[:12]}…")
            return
        size = int(row["size"])
        if not 0 <= request.offset <= size:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, f"offset {request.offset} outside 0..{size}")
        _log.info(
            "artifact %s → %s from offset %d",
            request.sha256[:12],
            request.device_id or context.peer(),
            request.offset,
        )
        f = await asyncio.to_thread(path.open, "rb")
        try:
            await asyncio.to_thread(f.seek, request.offset)
            offset = request.offset
            while offset < size:
                data = await asyncio.to_thread(f.read, min(CHUNK, size - offset))
                if not data:
                    break  # shorter on disk than registered: the agent sees a truncated artifact
                yield agent_pb2.ArtifactChunk(offset=offset, data=data, total_size=size)
                offset += len(data)
        finally:
            f.close()


def _finite(*healths: Any) -> None:
    """NaN and infinities in a status (an agent's bug or a hostile client) are stored as 0, not shown as
    'nan' in every listing."""
    for h in healths:
        for name in ("fps", "latency_p50_ms", "latency_p95_ms"):
            if not math.isfinite(getattr(h, name)):
                setattr(h, name, 0.0)
