"""A telemetry agent process for the delivery tests: the agent's real ``MqttPublisher`` with a disk spool,
publishing one ``Telemetry`` message every ``1/--rate`` seconds.

Every sequence number it appended goes to ``--log`` (one a line, flushed at once), and twice a second it
writes the publisher's figures to ``--stats`` (JSON). SIGUSR1: stop publishing (the publisher goes on
delivering what is spooled). SIGTERM: stop the publisher (OFFLINE status, bounded flush) and exit.

Usage: python tests/integration/telemetry_agent.py --broker mqtt://127.0.0.1:1883 --device cam-1
           --spool spool.db --log seqs.txt --stats stats.json [--fleet itest] [--rate 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from edgefleet.edge._telemetry import Identity, MqttPublisher, Priority, Spool, parse_broker_url
from edgefleet.proto.v1 import telemetry_pb2 as pb


def _stats(pub: MqttPublisher, published: int, publishing: bool) -> dict[str, Any]:
    s = pub.stats()
    return {
        "published": published,
        "publishing": publishing,
        "state": s.state.value,
        "connections": s.connections,
        "sent": s.sent,
        "acked": s.acked,
        "pending": s.spool.pending,
        "dropped": s.spool.dropped,
        "appended": s.spool.appended,
    }


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--broker", required=True)
    ap.add_argument("--fleet", default="itest")
    ap.add_argument("--device", required=True)
    ap.add_argument("--spool", type=Path, required=True)
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--stats", type=Path, required=True)
    ap.add_argument("--rate", type=float, default=10.0)
    args = ap.parse_args()
    publishing, done = threading.Event(), threading.Event()
    publishing.set()
    signal.signal(signal.SIGUSR1, lambda *_: publishing.clear())
    signal.signal(signal.SIGTERM, lambda *_: (publishing.clear(), done.set()))
    spool = Spool(args.spool)
    pub = MqttPublisher(
        parse_broker_url(args.broker),
        Identity(args.fleet, args.device),
        spool,
        backoff_s=(0.2, 2.0),
        connect_timeout_s=2.0,
    )
    pub.start()
    published = 0
    period = 1.0 / args.rate
    due = time.monotonic()
    with args.log.open("a", encoding="utf-8") as log:
        while not done.is_set():
            if publishing.is_set():
                msg = pb.Telemetry(interval_s=period)
                msg.pipelines.add(name="default", fps=float(published), model_version="det:1.0.0")
                log.write(f"{pub.publish('telemetry', msg, Priority.ROUTINE)}\n")
                log.flush()
                published += 1
                if published % 5 == 0:
                    _write(args.stats, _stats(pub, published, True))
                due += period
                done.wait(max(0.0, due - time.monotonic()))
            else:
                _write(args.stats, _stats(pub, published, False))
                done.wait(0.5)
    pub.stop(10.0)
    _write(args.stats, {**_stats(pub, published, False), "stopped": True})
    spool.close()


if __name__ == "__main__":
    main()
