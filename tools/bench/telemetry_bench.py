#!/usr/bin/env python3
"""Telemetry benchmark: controller ingest throughput and publish-to-stored latency on one Mosquitto with N
ingest replicas (separate processes on the shared subscription), and the agent's publishing overhead per
frame. Prints one JSON object (and writes it to --out).

Usage: .venv/bin/python tools/bench/telemetry_bench.py [--replicas 1] [--devices 100] [--messages 20000]
           [--publishers 4] [--encoding json|protobuf] [--mode live|backlog|both] [--rate 0]
           [--db sqlite | postgresql://postgres@127.0.0.1:5432/] [--agent-seconds 5] [--out FILE]
           [--delivery broker|controller|both] [--repeat 1] [--agent-messages 0] [--outage-seconds 0]

--delivery: what deletes an agent's spooled message, side by side in one run. ``broker``: the PUBACK (the
payloads carry no delivery chain, the replicas publish no acknowledgements); ``controller``: the
controller's acknowledgement (payloads carry header.prev, the replicas follow the chain and publish
watermarks). --repeat alternates them that many times. --agent-messages N: one real agent publisher
process (MqttPublisher, disk spool) sends N telemetry messages as fast as it can per delivery mode, and its
CPU per message until its spool is empty is measured (``_delivery_bench``). --outage-seconds S: two agents
(8 streams, telemetry every second, detection events), one per delivery mode, while the ingest replica is
down for S seconds: spool growth, then the time to drain and what was re-sent.

live: the simulated devices publish (at --rate messages/s in all, or as fast as they can) while the
replicas ingest; everything shares the cores, and publish-to-stored latency (agent clock in the header to
commit) is measured here. Publishers encode their payloads before the clock starts.
backlog: the messages wait in the broker for the replicas' persistent sessions first, then the replicas
drain them with no publisher running (what the replicas alone reach).

Per replica: messages stored, its share of the window, and CPU per stored message by stage: ``paho``
(the MQTT network thread: receiving, PUBACK writes, the enqueue callback), ``parse``/``store``/``ack``
(the writer thread) and ``other``. Starts its own mosquitto (free loopback port, temporary config).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "bench"))

from _delivery_bench import (  # noqa: E402
    bench_agent_delivery,
    bench_outage,
    comparison,
    fake_stats,
    telemetry_template,
)
from _harness import database_url, emit, load, machine  # noqa: E402

from edgefleet.cloud._db import create_engine  # noqa: E402
from edgefleet.cloud._telemetry import Ingester, TelemetryStore  # noqa: E402
from edgefleet.cloud._telemetry import parse_broker_url as cloud_url  # noqa: E402
from edgefleet.edge._telemetry import TelemetryAgent, TelemetryConfig  # noqa: E402
from edgefleet.edge._telemetry._messages import Encoding, Identity, encode, stamp, topic, with_prev  # noqa: E402
from edgefleet.proto.v1 import telemetry_pb2 as pb  # noqa: E402
from edgefleet.sdk import Detection, Result  # noqa: E402
from tests.integration.telemetry_broker import Mosquitto  # noqa: E402

SPAWN = multiprocessing.get_context("spawn")


_PLACEHOLDER = "1970-01-01T00:00:01.000000001Z"  # header time of the pre-encoded JSON payloads


def publish(
    port: int,
    idx: int,
    publishers: int,
    devices: int,
    count: int,
    encoding: str,
    prefix: str,
    rate: float,
    go: Any,
    ready: Any,
    chained: bool = False,
) -> None:
    """One publisher process: ``count`` telemetry messages round-robin over its share of the devices, at
    ``rate`` messages/s (0: as fast as it can); ``chained``: with header.prev (controller delivery).

    Payloads are encoded before ``go`` (only the header time is set as each is sent), so the publishers
    spend their CPU on MQTT rather than on building messages."""
    from google.protobuf.timestamp_pb2 import Timestamp
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    enc = Encoding(encoding)
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    props.ContentType = enc.content_type
    template = telemetry_template()
    seqs: dict[int, int] = {}
    work: list[tuple[str, Any]] = []
    for k in range(count):
        d = (idx + k * publishers) % devices
        ident = Identity("bench", f"{prefix}{d:05d}")
        seqs[d] = seqs.get(d, 0) + 1
        msg = pb.Telemetry()
        msg.CopyFrom(template)
        stamp(msg, ident, seqs[d], [], now=1.000000001)
        if chained and enc is Encoding.PROTOBUF:
            msg.header.prev = seqs[d] - 1
        text = encode(msg, enc)
        if chained and enc is Encoding.JSON:
            text = with_prev(text, enc.content_type, seqs[d] - 1)
        body: Any = msg if enc is Encoding.PROTOBUF else text.decode().split(_PLACEHOLDER)
        work.append((topic(ident, "telemetry"), body))
    c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    c.max_inflight_messages_set(200)
    c.max_queued_messages_set(0)
    c.connect("127.0.0.1", port)
    c.loop_start()
    ts = Timestamp()
    infos = []
    ready.release()
    go.wait(120)
    start = time.perf_counter()
    for k, (tp, body) in enumerate(work):
        if rate > 0 and (ahead := start + k / rate - time.perf_counter()) > 0:
            time.sleep(ahead)
        if enc is Encoding.PROTOBUF:
            body.header.time.FromNanoseconds(time.time_ns())
            payload = body.SerializeToString()
        else:
            ts.FromNanoseconds(time.time_ns())
            payload = ts.ToJsonString().join(body).encode()
        infos.append(c.publish(tp, payload, qos=1, properties=props))
    for info in infos:
        info.wait_for_publish(120)
    c.disconnect()
    c.loop_stop()


def _thread_cpu(name_prefix: str) -> float:
    """CPU seconds of the live thread whose name starts with ``name_prefix`` (0.0 if none)."""
    for t in threading.enumerate():
        if t.name.startswith(name_prefix) and t.ident is not None:
            return time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    return 0.0


def replica(
    url: str, db: str, index: int, stored_total: Any, stop: Any, out: Connection, buffered: bool = True
) -> None:
    """One ingest replica (its own process): ingest until ``stop``, then send its figures through ``out``."""
    engine = create_engine(db)
    store = TelemetryStore(engine, create=False)
    latencies: list[float] = []
    window = [0.0, 0.0]  # first and last store (wall clock)

    def on_stored(batch: list[Any]) -> None:
        now = time.time()
        latencies.extend(now - p.time for p in batch)
        window[0] = window[0] or now
        window[1] = now
        with stored_total.get_lock():
            stored_total.value += len(batch)

    def ingester() -> Ingester:
        return Ingester(
            cloud_url(url),
            store,
            client_id=f"bench-ingest-{index}",
            on_stored=on_stored,
            compact_every_s=None,
            batch_max=1000,
            queue_size=20000,
            device_rate_per_s=None,
            buffered_reads=buffered,
        )

    first = ingester()  # creates the persistent session on the shared subscription
    first.start()
    if not first.wait_subscribed(10):
        raise SystemExit(f"replica {index}: not subscribed")
    out.send("subscribed")
    mode = out.recv()  # "live": keep going; "backlog": go away now and come back when told
    ing = first
    if mode == "backlog":
        first.stop()
        out.send("away")
        out.recv()  # published: drain
        ing = ingester()
        ing.start()
    cpu0, paho0, t0 = time.process_time(), _thread_cpu("paho-mqtt-client-"), time.time()
    stop.wait(600)
    cpu1, paho1 = time.process_time(), _thread_cpu("paho-mqtt-client-")
    s = ing.stats()
    ing.stop()
    engine.dispose()
    out.send(
        {
            "stored": s.stored,
            "duplicates": s.duplicates,
            "rejected": s.rejected_total,
            "batches": s.batches,
            "window": window if window[0] else [t0, t0],
            "cpu_s": {"process": cpu1 - cpu0, "paho": paho1 - paho0, **getattr(s, "cpu_s", {})},
            "latencies": latencies,
            "acks_published": getattr(s, "acks_published", 0),
        }
    )


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _per_message(cpu: dict[str, float], stored: int) -> dict[str, float]:
    if not stored:
        return {}
    us = {k: round(v / stored * 1e6, 1) for k, v in cpu.items()}
    us["other"] = round(us["process"] - sum(v for k, v in us.items() if k != "process"), 1)
    return us


def bench_ingest(
    url: str,
    db: str,
    *,
    replicas: int,
    devices: int,
    messages: int,
    publishers: int,
    encoding: str,
    mode: str,
    rate: float = 0.0,
    broker_pid: int | None = None,
    buffered: bool = True,
    delivery: str = "broker",
) -> dict[str, Any]:
    TelemetryStore(create_engine(db)).engine.dispose()  # tables exist before the replicas start
    stored_total = SPAWN.Value("q", 0)
    stop = SPAWN.Event()
    pipes = [SPAWN.Pipe() for _ in range(replicas)]
    procs = [
        SPAWN.Process(target=replica, args=(url, db, i, stored_total, stop, child, buffered))
        for i, (_, child) in enumerate(pipes)
    ]
    for pr in procs:
        pr.start()
    for parent, _ in pipes:
        if not parent.poll(60) or parent.recv() != "subscribed":
            raise SystemExit("a replica did not subscribe")
    for parent, _ in pipes:
        parent.send(mode)
    port = int(url.rsplit(":", 1)[1])
    per_pub = messages // publishers
    total = per_pub * publishers
    prefix = f"{mode}-{os.getpid()}-{int(time.time())}-"  # device ids never seen before in this database
    go, ready = SPAWN.Event(), SPAWN.Semaphore(0)
    pubs = [
        SPAWN.Process(
            target=publish,
            args=(
                port,
                i,
                publishers,
                devices,
                per_pub,
                encoding,
                prefix,
                rate / publishers,
                go,
                ready,
                delivery == "controller",
            ),
        )
        for i in range(publishers)
    ]
    for pr in pubs:
        pr.start()
    for _ in pubs:
        ready.acquire(timeout=300)
    published_s: float | None = None
    if mode == "backlog":
        for parent, _ in pipes:
            parent.recv()  # away
        go.set()
        for pr in pubs:
            pr.join(600)
        t0 = time.time()
        broker0 = _proc_cpu(broker_pid) if broker_pid else 0.0
        for parent, _ in pipes:
            parent.send("drain")
    else:
        t0 = time.time()
        broker0 = _proc_cpu(broker_pid) if broker_pid else 0.0
        go.set()
        for pr in pubs:
            pr.join(600)
        published_s = time.time() - t0
    deadline = time.monotonic() + 600
    while stored_total.value < total and time.monotonic() < deadline:
        time.sleep(0.05)
    broker_cpu = (_proc_cpu(broker_pid) - broker0) if broker_pid else None
    stop.set()
    results = [parent.recv() for parent, _ in pipes]
    for pr in procs:
        pr.join(30)
    end = max(r["window"][1] for r in results)
    elapsed = end - t0
    stored = sum(r["stored"] for r in results)
    lat = np.array([x for r in results for x in r["latencies"]]) * 1000.0
    out: dict[str, Any] = {
        "mode": mode,
        "delivery": delivery,
        "replicas": replicas,
        "devices": devices,
        "messages": total,
        "encoding": encoding,
        "offered_rate_msgs_per_s": rate or "as fast as the publishers go",
        "payload_bytes": len(encode(telemetry_template(), Encoding(encoding))),
        "complete": stored >= total,
        "stored": stored,
        "ingest_msgs_per_s": round(stored / elapsed) if elapsed > 0 else None,
        "per_replica": [
            {
                "stored": r["stored"],
                "msgs_per_s": round(r["stored"] / elapsed) if elapsed > 0 else None,
                "batches": r["batches"],
                "acks_published": r["acks_published"],
                "cpu_us_per_msg": _per_message(r["cpu_s"], r["stored"]),
            }
            for r in results
        ],
        "db": db.split("://", 1)[0],
    }
    if broker_cpu is not None and stored:
        out["broker_cpu_us_per_msg"] = round(broker_cpu / stored * 1e6, 1)
    if published_s is not None:
        out["publish_msgs_per_s"] = round(total / published_s)
        out["latency_ms_p50"] = round(float(np.percentile(lat, 50)), 1) if len(lat) else None
        out["latency_ms_p99"] = round(float(np.percentile(lat, 99)), 1) if len(lat) else None
    return out


def bench_agent(url: str, seconds: float, workdir: Path) -> dict[str, object]:
    """8 streams x 30 fps of results with 3 detections each, fed to the agent (events rate-limited as by
    default) while it publishes telemetry every second; CPU per frame against the same loop without it."""
    dets = tuple(Detection((1.0, 2.0, 30.0, 40.0), 0.9, 0, "person") for _ in range(3))
    frames = int(seconds * 30)

    def run(agent: TelemetryAgent | None) -> tuple[float, list[float]]:
        calls: list[float] = []
        cpu0 = time.process_time()
        start = time.perf_counter()
        for f in range(frames):
            for s in range(8):
                r = Result(f"cam{s}", f, time.time(), "det", "1.0.0", 640, 480, 20.0, dets)
                if agent is not None:
                    t = time.perf_counter()
                    agent.detections("default", r)
                    calls.append(time.perf_counter() - t)
            sleep = start + (f + 1) / 30.0 - time.perf_counter()
            if sleep > 0:
                time.sleep(sleep)
        return time.process_time() - cpu0, calls

    base_cpu, _ = run(None)
    cfg = TelemetryConfig(
        fleet="bench",
        device_id="agent-0",
        broker=url,
        interval_s=1.0,
        gpu="none",
        spool_path=workdir / "agent-spool.db",
    )
    agent = TelemetryAgent(cfg)
    agent.add_pipeline("default", fake_stats)
    agent.start()
    try:
        cpu, calls = run(agent)
    finally:
        agent.stop()
    n = frames * 8
    c = np.array(calls) * 1e6
    return {
        "streams": 8,
        "fps_per_stream": 30,
        "frames": n,
        "call_us_mean": round(float(c.mean()), 2),
        "call_us_p99": round(float(np.percentile(c, 99)), 2),
        "process_cpu_us_per_frame": round((cpu - base_cpu) / n * 1e6, 2),
        "cpu_percent_of_one_core": round((cpu - base_cpu) / seconds * 100, 2),
    }


def _ingest_code() -> str:
    """Where the measured ``Ingester`` was imported from (this tree, or the one PYTHONPATH names)."""
    path = Path(sys.modules[Ingester.__module__].__file__ or "").parent
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--devices", type=int, default=100)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--publishers", type=int, default=4)
    ap.add_argument("--encoding", choices=[e.value for e in Encoding], default=Encoding.JSON.value)
    ap.add_argument("--mode", choices=["live", "backlog", "both"], default="both")
    ap.add_argument("--rate", type=float, default=0.0, help="live: messages/s offered in all (0: as fast as possible)")
    ap.add_argument("--db", default="sqlite", help="sqlite, or postgresql://HOST/ (a throwaway database per mode)")
    ap.add_argument("--agent-seconds", type=float, default=5.0, help="0: skip the agent overhead part")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument(
        "--paho",
        choices=["buffered", "plain", "both"],
        default="buffered",
        help="ingest replicas read with BufferedClient (default), paho as is, or both side by side",
    )
    ap.add_argument("--delivery", choices=["broker", "controller", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=1, help="alternate the delivery modes this many times")
    ap.add_argument("--agent-messages", type=int, default=0, help="agent CPU per message part (0: skip)")
    ap.add_argument("--outage-seconds", type=float, default=0.0, help="spool growth part (0: skip)")
    args = ap.parse_args()
    result: dict[str, Any] = {
        "command": shlex.join([".venv/bin/python", "tools/bench/telemetry_bench.py", *sys.argv[1:]]),
        # set to measure another tree of the controller with this bench (e.g. `git archive` of a release)
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "ingest_code": _ingest_code(),
        "machine": machine(),
        "load_at_start": load(),
    }
    modes = ["live", "backlog"] if args.mode == "both" else [args.mode]
    readers = {"buffered": [True], "plain": [False], "both": [True, False]}[args.paho]
    deliveries = ["broker", "controller"] if args.delivery == "both" else [args.delivery]
    runs = [(m, b, d, r) for m in modes for b in readers for r in range(args.repeat) for d in deliveries]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for mode, buffered, delivery, rep in runs if args.messages > 0 else []:
            key = f"ingest_{mode}" + ("" if buffered else "_plain_paho") + f"_{delivery}" + (f"_{rep}" if rep else "")
            broker = Mosquitto(work / f"mosquitto-{key}").start()
            try:
                with database_url(args.db, work / f"bench-{key}.db") as db:
                    result[key] = bench_ingest(
                        broker.url,
                        db,
                        replicas=args.replicas,
                        devices=args.devices,
                        messages=args.messages,
                        publishers=args.publishers,
                        encoding=args.encoding,
                        mode=mode,
                        rate=args.rate if mode == "live" else 0.0,
                        broker_pid=broker.proc.pid if broker.proc is not None else None,
                        buffered=buffered,
                        delivery=delivery,
                    )
            finally:
                broker.stop()
        if args.agent_seconds > 0:
            broker = Mosquitto(work / "mosquitto-agent").start()
            try:
                result["agent"] = bench_agent(broker.url, args.agent_seconds, work)
            finally:
                broker.stop()
        if args.agent_messages > 0:
            broker = Mosquitto(work / "mosquitto-agent-delivery").start()
            try:
                result["agent_delivery"] = bench_agent_delivery(
                    broker.url, work, deliveries, args.agent_messages, args.repeat, args.encoding
                )
            finally:
                broker.stop()
        if args.outage_seconds > 0:
            broker = Mosquitto(work / "mosquitto-outage").start()
            try:
                result["outage"] = bench_outage(broker.url, work, args.outage_seconds)
            finally:
                broker.stop()
    result["comparison"] = comparison(result)
    emit(result, args.out)


if __name__ == "__main__":
    main()
