#!/usr/bin/env python3
"""How fast one controller core can validate telemetry payloads, per encoding (prints JSON).

The ingest ceiling of one replica is bounded by this: every message is fully validated against the
protobuf schema before it is stored.

    .venv/bin/python tools/bench/telemetry_parse_bench.py [--messages 3000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "bench"))

from telemetry_bench import telemetry_template  # noqa: E402

from edgefleet.cloud._telemetry._validate import parse_message  # noqa: E402
from edgefleet.edge._telemetry._messages import Encoding, Identity, encode, stamp, topic  # noqa: E402
from edgefleet.proto.v1 import telemetry_pb2 as pb  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=3000)
    n = ap.parse_args().messages
    template = telemetry_template()
    out: dict[str, object] = {"messages": n}
    for enc, ctype in ((Encoding.JSON, "application/json"), (Encoding.PROTOBUF, "application/x-protobuf")):
        msgs = []
        for k in range(n):
            ident = Identity("bench", f"dev{k % 100:05d}")
            m = pb.Telemetry()
            m.CopyFrom(template)
            stamp(m, ident, k + 1, [])
            msgs.append((topic(ident, "telemetry"), encode(m, enc)))
        t0 = time.perf_counter()
        for tp, payload in msgs:
            parse_message(tp, payload, ctype, 256 * 1024)
        dt = time.perf_counter() - t0
        out[enc.value] = {
            "payload_bytes": len(msgs[0][1]),
            "us_per_message": round(dt / n * 1e6, 1),
            "messages_per_s_one_core": round(n / dt),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
