#!/usr/bin/env python3
"""How fast one controller core can validate telemetry payloads, per encoding (prints JSON).

Every message is fully validated against the protobuf schema before it is stored. For JSON the figure is
split into its steps (json.loads, the compiled validator, reading the stored facts) and set against
protobuf's ``json_format.ParseDict``, which validated it before (the verdicts agree:
tests/unit/telemetry/test_protojson.py).

    .venv/bin/python tools/bench/telemetry_parse_bench.py [--messages 3000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "bench"))

from _harness import emit, load, machine  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from telemetry_bench import telemetry_template  # noqa: E402

from edgefleet.cloud._telemetry._validate import _VALIDATORS, facts_of_json, parse_message  # noqa: E402
from edgefleet.edge._telemetry._messages import Encoding, Identity, encode, stamp, topic  # noqa: E402
from edgefleet.proto.v1 import telemetry_pb2 as pb  # noqa: E402


def _us(fn: object, items: list[object], n: int) -> float:
    t0 = time.perf_counter()
    for it in items:
        fn(it)  # type: ignore[operator]
    return round((time.perf_counter() - t0) / n * 1e6, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    n = args.messages
    template = telemetry_template()
    out: dict[str, object] = {
        "command": shlex.join([".venv/bin/python", "tools/bench/telemetry_parse_bench.py", *sys.argv[1:]]),
        "machine": machine(),
        "load_at_start": load(),
        "messages": n,
    }
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
        figures: dict[str, object] = {
            "payload_bytes": len(msgs[0][1]),
            "us_per_message": round(dt / n * 1e6, 1),
            "messages_per_s_one_core": round(n / dt),
        }
        if enc is Encoding.JSON:
            docs = [json.loads(p) for _, p in msgs]
            figures["steps_us"] = {
                "json_loads": _us(json.loads, [p for _, p in msgs], n),
                "validate": _us(_VALIDATORS["telemetry"], docs, n),
                "facts": _us(lambda d: facts_of_json("telemetry", d), docs, n),
            }
            figures["parsedict_us_per_message"] = _us(lambda d: json_format.ParseDict(d, pb.Telemetry()), docs, n)
        out[enc.value] = figures
    emit(out, args.out)


if __name__ == "__main__":
    main()
