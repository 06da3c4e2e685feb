#!/usr/bin/env python3
"""Fleet simulator: N simulated agents against a real controller process on loopback. Prints JSON.

    .venv/bin/python tools/sim/fleet_sim.py --agents 1000 --processes 4 \
        --out bench/results/fleet-sim-1000.json
    .venv/bin/python tools/sim/fleet_sim.py --agents 1000 --db postgresql://postgres@127.0.0.1:5432/

Each simulated agent speaks the real protocol (edgefleet.proto.v1) the way edge/_agent.py does: its own
gRPC channel with the agent's options, one `AgentService.Connect` stream, a Hello (device id, labels,
capabilities, one pipeline serving toy-yolo 1.0.0), StatusReports at the interval the Welcome asks for
(through a bounded queue, dropped when full, as the agent does), and for every command the agent's
steps: RECEIVED, DOWNLOADING (a real `FetchArtifact` of the artifact, sha256-checked, unless --no-fetch),
VERIFYING, INSTALLING, LOADING, WARMUP, GATE, CUTOVER, DONE, then HEALTH after the health window;
a command id seen before is answered with its stored outcome (duplicate). Agents are asyncio tasks
(grpc.aio), many per process, in several processes.

Phases, every one bounded in count and time:
  1. connect: every agent dials at once (up to --connect-concurrency per process): connection setup
     rate = agents / (first dial -> last Welcome);
  2. steady: --steady-s of status reports: status reports the controller handled per second (each report
     carries a running count in health.frames_in; the controller stores it, so handled = the stored counts'
     advance, read from the database) / CPU seconds the controller process used (psutil) = RPC/s per core;
  3. deploy: `deploy toy-yolo:2.0.0 --to fleet=sim --waves 100%`: time from the CreateRollout call to the
     first and last agent receiving its command, to every agent's DONE, to the rollout's `completed`;
  4. with --spec: `pipelines push` a spec (2 cameras, tracking, a zone) and `deploy --pipeline sim-site:1
     --to fleet=sim --waves 100%`: the same figures for the spec (an agent applies it at once, reports the
     spec's own status row, and its last-good after the health window), p99 and last included.
Only loopback; the controller, its database and every process started here are stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "bench"))

from _harness import (  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
    ControllerProcess,
    database_url,
    load,
    machine,
    wait_for,
)

FLEET_LABEL = {"fleet": "sim"}
AGENT_OPTIONS = [  # the real agent's channel options (edge/_agent.py)
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 4 << 20),
    ("grpc.max_send_message_length", 4 << 20),
]


SIM_SPEC = {
    "name": "sim-site",
    "version": 1,
    "connect_timeout_s": 5,
    "pipelines": {
        "cam": {
            "model": "toy-yolo",
            "sources": [
                {"type": "synthetic", "id": "door", "width": 640, "height": 480, "fps": 15},
                {"type": "synthetic", "id": "yard", "width": 640, "height": 480, "fps": 15},
            ],
            "analytics": [
                {"type": "track"},
                {"type": "zones", "zones": [{"name": "z", "points": [[0, 0], [9, 0], [9, 9]]}]},
            ],
        }
    },
}


# --- one worker process -------------------------------------------------------------------------------
@dataclass
class SimConfig:
    address: str
    model_ref: str
    model_sha: str
    fetch: bool
    swap_ms: float
    connect_timeout_s: float
    run_timeout_s: float
    connect_concurrency: int


@dataclass
class AgentRecord:
    device_id: str
    dial_at: float = 0.0
    welcome_at: float = 0.0
    status_sent: int = 0
    status_dropped: int = 0
    events_sent: int = 0
    fetched_bytes: int = 0
    errors: list[str] = field(default_factory=list)
    received: dict[str, float] = field(default_factory=dict)  # command id -> first receipt
    done: dict[str, float] = field(default_factory=dict)  # command id -> DONE sent
    last_good: dict[str, float] = field(default_factory=dict)  # command id -> last-good reported (HEALTH)


class SimAgent:
    """One simulated agent: the real agent's message flow without a pipeline."""

    def __init__(self, device_id: str, cfg: SimConfig, rec: AgentRecord) -> None:
        from edgefleet.proto.v1 import agent_pb2, agent_pb2_grpc, common_pb2

        self.pb, self.grpc_pb, self.common = agent_pb2, agent_pb2_grpc, common_pb2
        self.id, self.cfg, self.rec = device_id, cfg, rec
        self.serving, self.previous = cfg.model_ref, ""
        self.sha = cfg.model_sha
        self.last_good, self.last_good_sha = cfg.model_ref, cfg.model_sha  # as a real agent's state.json
        self.outcomes: dict[str, tuple[bool, str, str]] = {}
        self.inflight: set[str] = set()
        self.out: asyncio.Queue[Any] = asyncio.Queue(maxsize=1000)
        self.interval = 5.0
        self.tasks: set[asyncio.Task[Any]] = set()
        self.spec: tuple[str, str, str] | None = None  # (name, ref, sha) of the pipeline spec applied
        self.spec_good = ""

    def _pipeline(self) -> Any:
        c = self.common
        return c.PipelineStatus(
            name="cam",
            model_ref=self.serving,
            model_sha256=self.sha,
            state="running",
            health=c.Health(
                fps=30.0,
                latency_p50_ms=12.0,
                latency_p95_ms=20.0,
                frames_in=self.rec.status_sent,
                results=self.rec.status_sent,
                healthy=True,
            ),
            previous_ref=self.previous,
            last_good_ref=self.last_good,
            last_good_sha256=self.last_good_sha,
        )

    def _pipelines(self) -> list[Any]:
        """The pipeline, and a pipeline spec's own row once one is applied (as edge/_specs.py reports it)."""
        rows = [self._pipeline()]
        if self.spec is not None:
            name, ref, sha = self.spec
            c = self.common
            rows[0].spec_ref = ref.removeprefix("spec/")
            rows.append(
                c.PipelineStatus(
                    name=f"spec/{name}",
                    model_ref=ref,
                    model_sha256=sha,
                    state="running",
                    health=c.Health(fps=30.0, latency_p95_ms=20.0, healthy=True),
                    last_good_ref=self.spec_good,
                    spec_ref=ref.removeprefix("spec/"),
                )
            )
        return rows

    def _hello(self) -> Any:
        caps = self.common.Capabilities(
            arch=platform.machine(),
            os="Linux",
            python=platform.python_version(),
            agent_version="0.1.0-sim",
            ort_providers=["CPUExecutionProvider"],
            cpu_count=4,
            memory_mb=8192,
        )
        return self.pb.AgentMessage(
            hello=self.pb.Hello(
                device_id=self.id,
                labels={**FLEET_LABEL, "site": f"s{hash(self.id) % 10}"},
                capabilities=caps,
                pipelines=self._pipelines(),
                agent_version="0.1.0-sim",
            )
        )

    def _send(self, msg: Any) -> None:
        try:
            self.out.put_nowait(msg)
        except asyncio.QueueFull:
            self.rec.status_dropped += 1

    def _event(self, cid: str, step: Any, message: str = "", **kw: Any) -> None:
        self.rec.events_sent += 1
        self._send(
            self.pb.AgentMessage(
                event=self.pb.CommandEvent(command_id=cid, step=step, message=message, at=time.time(), **kw)
            )
        )

    async def run(self, stop: asyncio.Event, sem: asyncio.Semaphore) -> None:
        import grpc

        async with sem:
            self.rec.dial_at = time.time()
            channel = grpc.aio.insecure_channel(self.cfg.address, options=AGENT_OPTIONS)
            try:
                await asyncio.wait_for(channel.channel_ready(), self.cfg.connect_timeout_s)
                stub = self.grpc_pb.AgentServiceStub(channel)  # type: ignore[no-untyped-call,unused-ignore]
                call = stub.Connect(timeout=self.cfg.run_timeout_s)
                await call.write(self._hello())
                first = await asyncio.wait_for(call.read(), self.cfg.connect_timeout_s)
            except (TimeoutError, grpc.aio.AioRpcError) as exc:
                self.rec.errors.append(f"connect: {type(exc).__name__}: {exc}"[:200])
                await channel.close(None)
                return
        if first is grpc.aio.EOF or first.WhichOneof("body") != "welcome":  # type: ignore[attr-defined,unused-ignore]
            self.rec.errors.append("no Welcome")
            await channel.close(None)
            return
        self.rec.welcome_at = time.time()
        self.interval = first.welcome.status_interval_s or 5.0
        try:
            await self._serve(call, stub, stop)
        except grpc.aio.AioRpcError as exc:
            if not stop.is_set():
                self.rec.errors.append(f"stream: {exc.code().name}")
        finally:
            for t in list(self.tasks):
                t.cancel()
            call.cancel()
            await channel.close(None)

    async def _serve(self, call: Any, stub: Any, stop: asyncio.Event) -> None:
        import grpc

        for coro in (self._writer(call), self._status(stop)):
            t = asyncio.create_task(coro)
            self.tasks.add(t)
        reader = asyncio.create_task(call.read())
        stopper = asyncio.create_task(stop.wait())
        try:
            while True:
                done, _ = await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if stopper in done:
                    return
                msg = reader.result()
                if msg is grpc.aio.EOF:  # type: ignore[attr-defined,unused-ignore]
                    self.rec.errors.append("stream ended by the controller")
                    return
                if msg.WhichOneof("body") == "command":
                    self._on_command(stub, msg.command)
                reader = asyncio.create_task(call.read())
        finally:
            reader.cancel()
            stopper.cancel()

    async def _writer(self, call: Any) -> None:
        while True:
            await call.write(await self.out.get())

    async def _status(self, stop: asyncio.Event) -> None:
        await asyncio.sleep(random.uniform(0, self.interval))  # agents do not start in lockstep
        while not stop.is_set():
            self.rec.status_sent += 1
            pipes = self._pipelines()
            self._send(
                self.pb.AgentMessage(
                    status=self.pb.StatusReport(pipelines=pipes, health=pipes[0].health, sent_at=time.time())
                )
            )
            await asyncio.sleep(self.interval)

    def _on_command(self, stub: Any, cmd: Any) -> None:
        cid = cmd.command_id
        self.rec.received.setdefault(cid, time.time())
        if cid in self.outcomes:
            ok, message, ref = self.outcomes[cid]
            self._event(cid, self.pb.STEP_DONE, message, done=True, ok=ok, duplicate=True, model_ref=ref)
            return
        if cid in self.inflight:
            self._event(cid, self.pb.STEP_RECEIVED, "already in progress", duplicate=True)
            return
        self.inflight.add(cid)
        t = asyncio.create_task(self._execute(stub, cmd))
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    async def _execute(self, stub: Any, cmd: Any) -> None:
        pb, cid = self.pb, cmd.command_id
        kind = cmd.WhichOneof("kind") or ""
        self._event(cid, pb.STEP_RECEIVED, kind)
        try:
            if kind == "apply":
                ok, message, ref = await self._apply(stub, cid, cmd.apply)
            elif kind == "spec":
                sp = cmd.spec
                ref = f"spec/{sp.name}:{sp.version}"
                if hashlib.sha256(sp.document.encode()).hexdigest() != sp.sha256:
                    ok, message = False, "the spec's document does not match its sha256"
                else:
                    json.loads(sp.document)  # the agent parses it; a real one also applies it
                    self.spec = (sp.name, ref, sp.sha256)
                    if sp.rollback:
                        self.spec_good = ref
                    ok, message = True, f"running {ref.removeprefix('spec/')}"
            elif kind == "rollback":
                self._event(cid, pb.STEP_ROLLED_BACK, f"back to {cmd.rollback.to_ref}")
                self.serving, self.previous = cmd.rollback.to_ref, self.serving
                self.last_good, self.last_good_sha = self.serving, ""
                ok, message, ref = True, f"rolled back to {cmd.rollback.to_ref}", cmd.rollback.to_ref
            else:
                ok, message, ref = False, "unknown command kind", self.serving
        finally:
            self.inflight.discard(cid)
        self.outcomes[cid] = (ok, message, ref)
        held = ok and (kind == "rollback" or (kind == "spec" and cmd.spec.rollback))
        self._event(cid, pb.STEP_DONE, message, done=True, ok=ok, model_ref=ref, last_good=held)
        self.rec.done.setdefault(cid, time.time())
        if ok and kind == "apply":
            await asyncio.sleep(cmd.apply.health_window_s)
            if self.serving == ref:
                self.last_good, self.last_good_sha = ref, self.sha
                self._event(cid, pb.STEP_HEALTH, f"{ref} healthy; now last-good", model_ref=ref, last_good=True)
                self.rec.last_good.setdefault(cid, time.time())
        if ok and kind == "spec" and not cmd.spec.rollback:
            await asyncio.sleep(cmd.spec.health_window_s)
            if self.spec is not None and self.spec[1] == ref:
                self.spec_good = ref
                self._event(cid, pb.STEP_HEALTH, f"{ref} healthy; now last-good", model_ref=ref, last_good=True)
                self.rec.last_good.setdefault(cid, time.time())

    async def _apply(self, stub: Any, cid: str, apply: Any) -> tuple[bool, str, str]:
        pb, m = self.pb, apply.model
        ref = f"{m.name}:{m.version}"
        if ref == self.serving:
            return True, f"already serving {ref}", ref
        self._event(cid, pb.STEP_DOWNLOADING, f"{m.size} bytes", metrics={"offset": 0.0, "size": float(m.size)})
        if self.cfg.fetch:
            h, got = hashlib.sha256(), 0
            req = pb.FetchArtifactRequest(sha256=m.sha256, offset=0, device_id=self.id)
            async for chunk in stub.FetchArtifact(req, timeout=60):
                h.update(chunk.data)
                got += len(chunk.data)
            self.rec.fetched_bytes += got
            if got != m.size or h.hexdigest() != m.sha256:
                return False, f"artifact {m.sha256[:12]} does not verify", self.serving
        self._event(cid, pb.STEP_VERIFYING, "sha256, files and signature")
        self._event(cid, pb.STEP_INSTALLING, f"installed {ref}")
        for step, text in (
            (pb.STEP_LOADING, f"loading {ref} beside {self.serving}"),
            (pb.STEP_WARMUP, "warming up on 4 recent frames"),
            (pb.STEP_GATE, "passed"),
            (pb.STEP_CUTOVER, f"{ref} serving from the next batch"),
        ):
            self._event(cid, step, text)
            if step == pb.STEP_LOADING and self.cfg.swap_ms > 0:
                await asyncio.sleep(self.cfg.swap_ms / 1000.0)
        self.previous, self.serving, self.sha = self.serving, ref, m.sha256
        window = apply.health_window_s
        return True, f"serving {ref}" + (f"; watching health for {window:.0f} s" if window else ""), ref


async def _worker_main(ids: list[str], cfg: SimConfig, q: Any, stop_evt: Any) -> None:
    recs = [AgentRecord(i) for i in ids]
    stop = asyncio.Event()
    sem = asyncio.Semaphore(cfg.connect_concurrency)
    tasks = [asyncio.create_task(SimAgent(r.device_id, cfg, r).run(stop, sem)) for r in recs]
    deadline = time.monotonic() + cfg.connect_timeout_s + 5
    while time.monotonic() < deadline and any(r.welcome_at == 0 and not r.errors for r in recs):
        await asyncio.sleep(0.1)
    q.put(("connected", os.getpid(), len([r for r in recs if r.welcome_at])))
    end = time.monotonic() + cfg.run_timeout_s
    while not stop_evt.is_set() and time.monotonic() < end:
        await asyncio.sleep(0.2)
    stop.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 20)
    q.put(("result", os.getpid(), [r.__dict__ for r in recs]))


def worker(ids: list[str], cfg: SimConfig, q: Any, stop_evt: Any) -> None:
    asyncio.run(_worker_main(ids, cfg, q, stop_evt))


# --- the coordinator ----------------------------------------------------------------------------------
def stored_counts(db_url: str) -> dict[str, int]:
    """device -> the status count the controller last stored (health.frames_in)."""
    import sqlalchemy as sa

    from edgefleet.cloud._db import create_engine, devices

    engine = create_engine(db_url)
    try:
        with engine.connect() as c:
            rows = c.execute(sa.select(devices.c.device_id, devices.c.health)).all()
    finally:
        engine.dispose()
    out = {}
    for dev, health in rows:
        h = json.loads(health) if isinstance(health, str) else (health or {})
        out[dev] = int(h.get("frames_in", 0))
    return out


def cpu_s(pids: list[int]) -> float:
    import psutil  # type: ignore[import-untyped,unused-ignore]

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))], 4)


def _collect(q: Any, kind: str, n: int, timeout: float) -> list[Any]:
    import queue

    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            k, _pid, payload = q.get(timeout=0.5)
            if k == kind:
                got.append(payload)
    return got


def run(args: argparse.Namespace) -> dict[str, Any]:
    from edgefleet.cloud import FleetClient
    from tests.support.onnx_models import yolo_package

    result: dict[str, Any] = {
        "bench": "fleet-sim",
        "machine": machine(),
        "command": " ".join(sys.argv),
        "agents": args.agents,
        "processes": args.processes,
        "db": args.db,
        "status_interval_s": args.status_interval,
        "fetch": args.fetch,
        "load_at_start": load(),
    }
    with (
        tempfile.TemporaryDirectory(prefix="edgefleet-fleet-sim-") as tmp,
        database_url(args.db, Path(tmp) / "controller.db") as url,
    ):
        work = Path(tmp)
        ctl = ControllerProcess(
            work,
            url,
            allow_unsigned=True,
            extra=("--status-interval", str(args.status_interval), "--health-window", "1"),
        ).start()
        procs: list[Any] = []
        ctx = mp.get_context("spawn")
        stop_evt = ctx.Event()
        try:
            with FleetClient(ctl.address, timeout_s=60) as fleet:
                v1 = fleet.push(yolo_package(work / "v1")).model
                v2 = fleet.push(yolo_package(work / "v2", version="2.0.0")).model
                cfg = SimConfig(
                    ctl.address,
                    f"{v1.name}:{v1.version}",
                    v1.sha256,
                    args.fetch,
                    args.swap_ms,
                    args.connect_timeout,
                    args.run_timeout,
                    args.connect_concurrency,
                )
                q = ctx.Queue()
                ids = [f"sim-{i:05d}" for i in range(args.agents)]
                t_spawn = time.time()
                for p in range(args.processes):
                    proc = ctx.Process(target=worker, args=(ids[p :: args.processes], cfg, q, stop_evt))
                    proc.start()
                    procs.append(proc)
                connected = sum(_collect(q, "connected", args.processes, args.connect_timeout + 60))
                result["connected"] = connected
                time.sleep(args.settle_s)
                result["steady"] = steady(args, ctl.pid, [p.pid for p in procs], url)
                result["deploy"] = deploy(args, fleet, f"{v2.name}:{v2.version}", ctl.pid)
                if args.spec:
                    fleet.push_spec(json.dumps(SIM_SPEC))
                    result["spec_deploy"] = deploy(args, fleet, "", ctl.pid, pipeline="sim-site:1")
                stop_evt.set()
                records = [r for batch in _collect(q, "result", args.processes, 60) for r in batch]
                result["connect"] = connect_figures(records, t_spawn)
                result["deploy"] |= delivery_figures(records, result["deploy"])
                if args.spec:
                    result["spec_deploy"] |= delivery_figures(records, result["spec_deploy"])
                result["agents_summary"] = {
                    "status_sent": sum(r["status_sent"] for r in records),
                    "status_dropped_queue_full": sum(r["status_dropped"] for r in records),
                    "events_sent": sum(r["events_sent"] for r in records),
                    "fetched_bytes": sum(r["fetched_bytes"] for r in records),
                    "agents_with_errors": sum(1 for r in records if r["errors"]),
                    "first_errors": [e for r in records for e in r["errors"]][:5],
                }
        finally:
            stop_evt.set()
            for proc in procs:
                proc.join(30)
                if proc.is_alive():
                    proc.terminate()
                    proc.join(5)
            ctl.stop()
            result["controller_log_tail"] = ctl.log.read_text(errors="replace").splitlines()[-5:]
    result["load_at_end"] = load()
    return result


def steady(args: argparse.Namespace, ctl_pid: int, sim_pids: list[int], url: str) -> dict[str, Any]:
    c0, s0, w0 = stored_counts(url), cpu_s(sim_pids), time.monotonic()
    cpu0 = cpu_s([ctl_pid])
    time.sleep(args.steady_s)
    cpu1 = cpu_s([ctl_pid])
    c1, s1, w1 = stored_counts(url), cpu_s(sim_pids), time.monotonic()
    handled = sum(c1.get(d, 0) - c0.get(d, 0) for d in c1)
    wall, ctl_cpu = w1 - w0, cpu1 - cpu0
    return {
        "window_s": round(wall, 2),
        "offered_status_per_s": round(args.agents / args.status_interval, 1),
        "handled_status_per_s": round(handled / wall, 1),
        "controller_cpu_s": round(ctl_cpu, 2),
        "controller_cores_busy": round(ctl_cpu / wall, 3),
        "status_rpc_per_controller_core_s": round(handled / ctl_cpu, 1) if ctl_cpu > 0 else None,
        "simulator_cores_busy": round((s1 - s0) / wall, 3),
        "note": "2-core machine shared by the controller, the simulator and other work: the controller "
        "gets what is left (see controller_cores_busy, simulator_cores_busy and load)",
        "load": load(),
    }


def deploy(args: argparse.Namespace, fleet: Any, ref: str, ctl_pid: int, pipeline: str = "") -> dict[str, Any]:
    cpu0 = cpu_s([ctl_pid])
    t0 = time.time()
    ro = fleet.deploy(ref, FLEET_LABEL, ["100%"], health_window_s=1.0, pipeline_ref=pipeline)
    t_rpc = time.time()
    final = wait_for(
        f"rollout {ro.rollout_id} to finish",
        lambda: (r := fleet.rollout(ro.rollout_id)).state in ("completed", "aborted") and r,
        args.deploy_timeout,
        1.0,
    )
    states: dict[str, int] = {}
    for m in final.devices:
        states[m.state] = states.get(m.state, 0) + 1
    return {
        "model": ref or None,
        "pipeline_spec": pipeline or None,
        "rollout": ro.rollout_id,
        "members": len(ro.devices),
        "t0": t0,
        "create_rollout_rpc_s": round(t_rpc - t0, 3),
        "rollout_state": final.state,
        "rollout_message": final.message,
        "member_states": states,
        "deploy_to_rollout_completed_s": round(final.updated_at - t0, 3),
        "controller_cpu_s": round(cpu_s([ctl_pid]) - cpu0, 2),
        "load": load(),
    }


def connect_figures(records: list[dict[str, Any]], t_spawn: float) -> dict[str, Any]:
    ok = [r for r in records if r["welcome_at"]]
    if not ok:
        return {"connected": 0}
    first_dial = min(r["dial_at"] for r in ok)
    last = max(r["welcome_at"] for r in ok)
    each = [r["welcome_at"] - r["dial_at"] for r in ok]
    return {
        "connected": len(ok),
        "failed": len(records) - len(ok),
        "first_dial_to_last_welcome_s": round(last - first_dial, 3),
        "setup_rate_per_s": round(len(ok) / (last - first_dial), 1) if last > first_dial else None,
        "dial_to_welcome_p50_s": pct(each, 50),
        "dial_to_welcome_p99_s": pct(each, 99),
        "spawn_to_first_dial_s": round(first_dial - t_spawn, 3),
        "definition": "each agent: channel, Connect, Hello -> Welcome (the controller has stored the "
        "device); all dial at once",
    }


def delivery_figures(records: list[dict[str, Any]], dep: dict[str, Any]) -> dict[str, Any]:
    prefix, t0 = dep["rollout"] + ".", dep.pop("t0")
    recv = [t - t0 for r in records for cid, t in r["received"].items() if cid.startswith(prefix)]
    done = [t - t0 for r in records for cid, t in r["done"].items() if cid.startswith(prefix)]
    good = [t - t0 for r in records for cid, t in r["last_good"].items() if cid.startswith(prefix)]
    return {
        "agents_received": len(recv),
        "agents_done": len(done),
        "first_received_s": pct(recv, 0),
        "median_received_s": pct(recv, 50),
        "p99_received_s": pct(recv, 99),
        "last_received_s": pct(recv, 100),
        "p99_done_s": pct(done, 99),
        "last_done_s": pct(done, 100),
        "agents_last_good": len(good),
        "p99_last_good_s": pct(good, 99),
        "last_last_good_s": pct(good, 100),
        "definition": "seconds after the CreateRollout call (desired state written for every device, each "
        "stream woken, the command sent; DONE: the agent's acknowledgment after its steps, i.e. applied; "
        "last-good: its HEALTH event after the 1 s health window)",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--db", default="sqlite", help="sqlite, or postgresql://postgres@127.0.0.1:5432/")
    ap.add_argument("--status-interval", type=float, default=1.0, help="seconds (the controller's default is 5)")
    ap.add_argument("--steady-s", type=float, default=20.0)
    ap.add_argument("--settle-s", type=float, default=3.0)
    ap.add_argument(
        "--fetch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="download the artifact on apply, as the agent does",
    )
    ap.add_argument("--swap-ms", type=float, default=0.0, help="simulated load+warm-up time per apply")
    ap.add_argument("--connect-timeout", type=float, default=120.0)
    ap.add_argument("--connect-concurrency", type=int, default=1000, help="dials in flight per process")
    ap.add_argument("--deploy-timeout", type=float, default=300.0)
    ap.add_argument("--run-timeout", type=float, default=900.0, help="hard bound on a worker's life")
    ap.add_argument(
        "--spec", action=argparse.BooleanOptionalAction, default=True, help="phase 4: a pipeline spec rollout"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not (1 <= args.agents <= 20_000 and 1 <= args.processes <= 64):
        ap.error("--agents 1..20000, --processes 1..64")
    res = run(args)
    text = json.dumps(res, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
