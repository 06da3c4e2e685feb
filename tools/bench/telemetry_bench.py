#!/usr/bin/env python3
"""Telemetry benchmark: controller ingest throughput and publish-to-stored latency on one Mosquitto, and
the agent's publishing overhead per frame. Prints one JSON object.

Usage: .venv/bin/python tools/bench/telemetry_bench.py [--devices 100] [--messages 20000] [--publishers 4]
           [--db sqlite:///PATH | postgresql+psycopg://...] [--agent-seconds 5]

Starts its own mosquitto (free loopback port, temporary config) and deletes it afterwards.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from sqlalchemy import create_engine

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edgefleet.cloud._telemetry import Ingester, TelemetryStore  # noqa: E402
from edgefleet.cloud._telemetry import parse_broker_url as cloud_url  # noqa: E402
from edgefleet.edge._telemetry import TelemetryAgent, TelemetryConfig  # noqa: E402
from edgefleet.edge._telemetry._messages import Encoding, Identity, encode, stamp, topic  # noqa: E402
from edgefleet.proto.v1 import telemetry_pb2 as pb  # noqa: E402
from edgefleet.sdk import Detection, PipelineStats, Result, StreamStats  # noqa: E402
from tests.integration.telemetry_broker import Mosquitto  # noqa: E402


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


def publish(port: int, idx: int, publishers: int, devices: int, count: int) -> None:
    """One publisher process: ``count`` telemetry messages round-robin over its share of the devices."""
    template = telemetry_template()
    c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    c.max_inflight_messages_set(200)
    c.max_queued_messages_set(0)
    c.connect("127.0.0.1", port)
    c.loop_start()
    seqs: dict[int, int] = {}
    infos = []
    for k in range(count):
        d = (idx + k * publishers) % devices
        ident = Identity("bench", f"dev{d:05d}")
        seqs[d] = seqs.get(d, 0) + 1
        msg = pb.Telemetry()
        msg.CopyFrom(template)
        stamp(msg, ident, seqs[d], [])
        infos.append(c.publish(topic(ident, "telemetry"), encode(msg, Encoding.JSON), qos=1))
    for info in infos:
        info.wait_for_publish(60)
    c.disconnect()
    c.loop_stop()


def bench_ingest(url: str, db: str, devices: int, messages: int, publishers: int) -> dict[str, object]:
    engine = create_engine(db)
    store = TelemetryStore(engine)
    latencies: list[float] = []
    lock = threading.Lock()
    stored = [0]
    done = threading.Event()

    def on_stored(batch: list[object]) -> None:
        now = time.time()
        with lock:
            latencies.extend(now - p.time for p in batch)  # type: ignore[attr-defined]
            stored[0] += len(batch)
            if stored[0] >= messages:
                done.set()

    ing = Ingester(
        cloud_url(url),
        store,
        client_id="bench-ingest",
        on_stored=on_stored,
        compact_every_s=None,
        batch_max=1000,
        queue_size=20000,
    )
    ing.start()
    assert ing.wait_subscribed(10)
    per_pub = messages // publishers

    # Publishers run in their own processes (their own GIL), as devices would.
    ctx = multiprocessing.get_context("spawn")
    port = int(url.rsplit(":", 1)[1])
    t0 = time.perf_counter()
    procs = [ctx.Process(target=publish, args=(port, i, publishers, devices, per_pub)) for i in range(publishers)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(300)
    published_s = time.perf_counter() - t0
    ok = done.wait(300)
    elapsed = time.perf_counter() - t0
    ing.stop()
    engine.dispose()
    lat = np.array(latencies) * 1000.0
    total = per_pub * publishers
    return {
        "devices": devices,
        "messages": total,
        "complete": ok,
        "stored": stored[0],
        "payload_bytes": len(encode(telemetry_template(), Encoding.JSON)),
        "publish_msgs_per_s": round(total / published_s),
        "ingest_msgs_per_s": round(stored[0] / elapsed),
        "latency_ms_p50": round(float(np.percentile(lat, 50)), 1) if len(lat) else None,
        "latency_ms_p99": round(float(np.percentile(lat, 99)), 1) if len(lat) else None,
        "db": db.split("://", 1)[0],
    }


def fake_stats() -> PipelineStats:
    streams = {
        f"cam{i}": StreamStats(
            f"cam{i}", True, 900, 900, 30.0, 0, 0, 0, 0.0, 0, 10.0, 20.0, 30.0, True, False, None, "det:1.0.0"
        )
        for i in range(8)
    }
    return PipelineStats(
        30.0,
        7200,
        7200,
        240.0,
        0,
        streams,
        {},
        {"infer": 0},
        {"counts": {}, "bytes": {}},
        0.0,
        900,
        8.0,
        "det:1.0.0",
    )


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=100)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--publishers", type=int, default=4)
    ap.add_argument("--db", default="")
    ap.add_argument("--agent-seconds", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = Mosquitto(work / "mosquitto").start()
        try:
            db = args.db or f"sqlite:///{work / 'bench.db'}"
            ingest = bench_ingest(broker.url, db, args.devices, args.messages, args.publishers)
            agent = bench_agent(broker.url, args.agent_seconds, work)
        finally:
            broker.stop()
    print(
        json.dumps(
            {
                "host": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "machine": platform.machine(),
                },
                "ingest": ingest,
                "agent": agent,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
