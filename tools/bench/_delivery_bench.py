"""Parts of tools/bench/telemetry_bench.py that compare the two delivery modes side by side with real
agent publishers (``MqttPublisher`` with a disk spool, each in its own process) against a real Mosquitto
and a real ingest replica:

* ``bench_agent_delivery``: one agent sends N telemetry messages as fast as it can; its process CPU per
  message, from the first publish until its spool is empty (everything PUBACKed, or acknowledged by the
  controller), per mode, alternating modes ``repeat`` times;
* ``bench_outage``: two agents (8 streams, telemetry every second, detection events as the agent rate-
  limits them), one per mode, while the ingest replica is down: spool size over time, then how long the
  spool takes to drain and what was sent again.
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from edgefleet.edge._telemetry import Delivery, Identity, MqttPublisher, Priority, Spool, parse_broker_url
from edgefleet.edge._telemetry._messages import Encoding
from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk import Detection, PipelineStats, Result, StreamStats

__all__ = ["bench_agent_delivery", "bench_outage", "comparison", "fake_stats", "telemetry_template"]

SPAWN = multiprocessing.get_context("spawn")


def telemetry_template(streams: int = 8) -> pb.Telemetry:
    m = pb.Telemetry(interval_s=10.0)
    p = m.pipelines.add(name="default", fps=240.0, model_version="det:1.0.0")
    p.latency.p95_ms = 25.0
    for i in range(streams):
        s = p.streams.add(stream_id=f"cam{i}", fps=30.0, frames_in=1000, results=1000)
        s.latency.p95_ms = 25.0
    m.system.cpu_pct = 35.0
    m.system.gpus.add(index=0, name="Orin", utilization_pct=60.0)
    return m


def fake_stats() -> PipelineStats:
    streams = {
        f"cam{i}": StreamStats(
            f"cam{i}", True, 900, 900, 30.0, 0, 0, 0, 0.0, 0, 10.0, 20.0, 30.0, True, False, None, "det:1.0.0"
        )
        for i in range(8)
    }
    return PipelineStats(
        30.0, 7200, 7200, 240.0, 0, streams, {}, {"infer": 0}, {"counts": {}, "bytes": {}}, 0.0, 900, 8.0, "det:1.0.0"
    )


# --- the ingest replica (its own process, stoppable) ---------------------------------------------------
def _replica(url: str, db: str, client_id: str, stop: Any, ready: Any, out: Connection) -> None:
    from edgefleet.cloud._db import create_engine
    from edgefleet.cloud._telemetry import Ingester, TelemetryStore
    from edgefleet.cloud._telemetry import parse_broker_url as cloud_url

    engine = create_engine(db)
    ing = Ingester(cloud_url(url), TelemetryStore(engine, create=False), client_id=client_id, compact_every_s=None)
    ing.start()
    if not ing.wait_subscribed(20):
        raise SystemExit("replica not subscribed")
    ready.set()
    stop.wait(3600)
    s = ing.stats()
    ing.stop()
    engine.dispose()
    out.send({"stored": s.stored, "duplicates": s.duplicates, "acks_published": s.acks_published})


class Replica:
    """An ingest replica process with a persistent session (same client id each start)."""

    def __init__(self, url: str, db: str, client_id: str = "bench-delivery-replica") -> None:
        self.url, self.db, self.client_id = url, db, client_id
        self.proc: Any = None
        self.totals: dict[str, int] = {"stored": 0, "duplicates": 0, "acks_published": 0}

    def start(self) -> None:
        self._stop, ready = SPAWN.Event(), SPAWN.Event()
        self._pipe, child = SPAWN.Pipe()
        self.proc = SPAWN.Process(target=_replica, args=(self.url, self.db, self.client_id, self._stop, ready, child))
        self.proc.start()
        if not ready.wait(60):
            raise SystemExit("the ingest replica did not start")

    def stop(self) -> dict[str, int]:
        self._stop.set()
        got: dict[str, int] = self._pipe.recv() if self._pipe.poll(60) else {}
        self.proc.join(30)
        for k, v in got.items():
            self.totals[k] += v
        return got


# --- one agent publisher, as fast as it can --------------------------------------------------------
def _agent_burst(url: str, device: str, delivery: str, count: int, encoding: str, spool: str, out: Connection) -> None:
    pub = MqttPublisher(
        parse_broker_url(url), Identity("bench", device), Spool(spool), delivery=delivery, encoding=Encoding(encoding)
    )
    pub.start()
    deadline = time.monotonic() + 30
    while pub.state.value != "connected" or len(pub.spool) > 0:  # its ONLINE status delivered first
        if time.monotonic() > deadline:
            raise SystemExit("agent did not connect")
        time.sleep(0.05)
    template = telemetry_template()
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(count):
        msg = pb.Telemetry()
        msg.CopyFrom(template)
        pub.publish("telemetry", msg, Priority.ROUTINE)
    published = time.perf_counter() - t0
    while len(pub.spool) > 0 and time.perf_counter() - t0 < 600:
        time.sleep(0.05)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    s = pub.stats()
    pub.stop(5)
    out.send(
        {
            "delivery": delivery,
            "messages": count,
            "cpu_us_per_msg": round(cpu / count * 1e6, 1),
            "publish_s": round(published, 3),
            "delivered_s": round(wall, 3),
            "delivered_msgs_per_s": round(count / wall),
            "sent": s.sent,
            "acknowledgements": s.watermarks,
            "resends": s.resends,
            "left_in_spool": s.spool.pending,
        }
    )


def bench_agent_delivery(
    url: str, workdir: Path, deliveries: list[str], messages: int, repeat: int, encoding: str
) -> dict[str, Any]:
    """Agent CPU per published message, per delivery mode, alternating (one replica ingests throughout)."""
    from _harness import database_url

    runs: list[dict[str, Any]] = []
    with database_url("sqlite", workdir / "agent-delivery.db") as db:
        from edgefleet.cloud._db import create_engine
        from edgefleet.cloud._telemetry import TelemetryStore

        TelemetryStore(create_engine(db)).engine.dispose()
        replica = Replica(url, db)
        replica.start()
        try:
            for rep in range(repeat):
                for delivery in deliveries:
                    parent, child = SPAWN.Pipe()
                    spool = str(workdir / f"agent-{delivery}-{rep}.db")
                    device = f"burst-{delivery}-{rep}-{int(time.time())}"
                    proc = SPAWN.Process(
                        target=_agent_burst, args=(url, device, delivery, messages, encoding, spool, child)
                    )
                    proc.start()
                    if not parent.poll(900):
                        raise SystemExit(f"agent run {delivery} {rep} gave no result")
                    runs.append(parent.recv())
                    proc.join(30)
        finally:
            replica.stop()
    out: dict[str, Any] = {"runs": runs}
    for delivery in deliveries:
        mine = [r for r in runs if r["delivery"] == delivery]
        out[f"{delivery}_cpu_us_per_msg_median"] = statistics.median(r["cpu_us_per_msg"] for r in mine)
        out[f"{delivery}_delivered_msgs_per_s_median"] = statistics.median(r["delivered_msgs_per_s"] for r in mine)
    return out


# --- the outage ------------------------------------------------------------------------------------
def _agent_live(url: str, device: str, delivery: str, spool_dir: str, stop: Any, out: Connection) -> None:
    """A real TelemetryAgent: 8 streams x 30 fps of results with 3 detections each (events rate-limited as
    by default) and telemetry every second; spool figures every 5 s through ``out``."""
    from edgefleet.edge._telemetry import TelemetryAgent, TelemetryConfig

    cfg = TelemetryConfig(
        fleet="bench",
        device_id=device,
        broker=url,
        interval_s=1.0,
        gpu="none",
        delivery=delivery,  # type: ignore[arg-type]
        spool_path=Path(spool_dir) / f"{device}.db",
    )
    agent = TelemetryAgent(cfg)
    agent.add_pipeline("default", fake_stats)
    agent.start()
    dets = tuple(Detection((1.0, 2.0, 30.0, 40.0), 0.9, 0, "person") for _ in range(3))
    start = time.monotonic()
    frame, report = 0, start
    cpu0 = time.process_time()
    while not stop.is_set():
        for s in range(8):
            agent.detections("default", Result(f"cam{s}", frame, time.time(), "det", "1.0.0", 640, 480, 20.0, dets))
        frame += 1
        now = time.monotonic()
        if now >= report:
            assert agent.publisher is not None and agent.spool is not None
            p, sp = agent.publisher.stats(), agent.spool.stats()
            out.send(
                {
                    "t": round(now - start, 1),
                    "pending": sp.pending,
                    "bytes": sp.bytes,
                    "appended": sp.appended,
                    "dropped": sp.dropped_total,
                    "sent": p.sent,
                    "resends": p.resends,
                    "cpu_s": round(time.process_time() - cpu0, 3),
                }
            )
            report += 5.0
        time.sleep(max(0.0, start + frame / 30.0 - time.monotonic()))
    appended = agent.spool.stats().appended if agent.spool is not None else 0
    agent.stop()
    out.send({"final": True, "appended": appended})


def bench_outage(url: str, workdir: Path, outage_s: float, warm_s: float = 20.0) -> dict[str, Any]:
    """Both delivery modes at once, each its own agent process, while the ingest replica is down."""
    from _harness import database_url

    from edgefleet.cloud._db import create_engine
    from edgefleet.cloud._telemetry import TelemetryStore

    stamp = int(time.time())
    devices = {d: f"outage-{d}-{stamp}" for d in (Delivery.BROKER.value, Delivery.CONTROLLER.value)}
    timeline: dict[str, list[dict[str, Any]]] = {d: [] for d in devices}
    with database_url("sqlite", workdir / "outage.db") as db, tempfile.TemporaryDirectory() as spools:
        TelemetryStore(create_engine(db)).engine.dispose()
        replica = Replica(url, db, "bench-outage-replica")
        replica.start()
        stop = SPAWN.Event()
        pipes = {}
        procs = []
        for delivery, device in devices.items():
            parent, child = SPAWN.Pipe()
            pipes[delivery] = parent
            proc = SPAWN.Process(target=_agent_live, args=(url, device, delivery, spools, stop, child))
            proc.start()
            procs.append(proc)

        def pump(until: float, phase: str) -> None:
            while time.monotonic() < until:
                for delivery, pipe in pipes.items():
                    while pipe.poll(0.05):
                        timeline[delivery].append({**pipe.recv(), "phase": phase})

        pump(time.monotonic() + warm_s, "up")
        replica.stop()
        down_at = time.monotonic()
        pump(down_at + outage_s, "controller down")
        replica.start()
        back_at = time.monotonic()
        drained: dict[str, float | None] = {d: None for d in devices}
        base = {d: max((r["pending"] for r in timeline[d] if r["phase"] == "up"), default=5) for d in devices}
        while time.monotonic() - back_at < 300 and any(v is None for v in drained.values()):
            pump(time.monotonic() + 1.0, "controller back")
            for d in devices:
                last = timeline[d][-1] if timeline[d] else None
                if drained[d] is None and last and last["phase"] == "controller back" and last["pending"] <= base[d]:
                    drained[d] = round(time.monotonic() - back_at, 1)
        stop.set()
        finals = {d: None for d in devices}
        for d, pipe in pipes.items():
            while pipe.poll(30):
                item = pipe.recv()
                if item.get("final"):
                    finals[d] = item
                    break
                timeline[d].append({**item, "phase": "controller back"})
        for proc in procs:
            proc.join(30)
        time.sleep(2.0)
        replica.stop()
        engine = create_engine(db)
        store = TelemetryStore(engine, create=False)
        stored = {d: len(store.sequences(dev)) for d, dev in devices.items()}
        engine.dispose()
    out: dict[str, Any] = {"outage_s": outage_s, "streams": 8, "telemetry_interval_s": 1.0, "replica": replica.totals}
    for d in devices:
        down = [r for r in timeline[d] if r["phase"] == "controller down"]
        peak = max(down, key=lambda r: r["pending"]) if down else {}
        out[d] = {
            "peak_pending_entries": peak.get("pending"),
            "peak_pending_bytes": peak.get("bytes"),
            "appended_total": (finals[d] or {}).get("appended"),
            "stored_total": stored[d],
            "dropped_total": timeline[d][-1]["dropped"] if timeline[d] else None,
            "drained_s_after_controller_back": drained[d],
            "resends": timeline[d][-1]["resends"] if timeline[d] else None,
            "sent_total": timeline[d][-1]["sent"] if timeline[d] else None,
            "timeline": timeline[d],
        }
    return out


def _runs(result: dict[str, Any], mode: str, delivery: str) -> list[dict[str, Any]]:
    prefix = f"ingest_{mode}_{delivery}"
    return [v for k, v in result.items() if (k == prefix or k.startswith(prefix + "_")) and isinstance(v, dict)]


def comparison(result: dict[str, Any]) -> dict[str, Any]:
    """controller / broker delivery ratios of what was measured in this run (1.0: the same), from the
    medians over the repeats (--repeat alternates the two modes)."""
    out: dict[str, Any] = {}
    for mode in ("live", "backlog"):
        b, c = _runs(result, mode, "broker"), _runs(result, mode, "controller")
        if not b or not c:
            continue
        rate_b = statistics.median(r["ingest_msgs_per_s"] or 0 for r in b)
        rate_c = statistics.median(r["ingest_msgs_per_s"] or 0 for r in c)
        cpu_b = statistics.median(sum(x["cpu_us_per_msg"].get("process", 0.0) for x in r["per_replica"]) for r in b)
        cpu_c = statistics.median(sum(x["cpu_us_per_msg"].get("process", 0.0) for x in r["per_replica"]) for r in c)
        out[f"ingest_{mode}"] = {
            "runs_per_mode": len(b),
            "broker_msgs_per_s_median": rate_b,
            "controller_msgs_per_s_median": rate_c,
            "msgs_per_s_controller_over_broker": round(rate_c / rate_b, 3) if rate_b else None,
            "broker_replica_cpu_us_per_msg_median": cpu_b,
            "controller_replica_cpu_us_per_msg_median": cpu_c,
            "replica_cpu_per_msg_controller_over_broker": round(cpu_c / cpu_b, 3) if cpu_b else None,
        }
    agent = result.get("agent_delivery")
    if agent and agent.get("broker_cpu_us_per_msg_median"):
        out["agent_cpu_per_msg_controller_over_broker"] = round(
            agent["controller_cpu_us_per_msg_median"] / agent["broker_cpu_us_per_msg_median"], 3
        )
    return out
