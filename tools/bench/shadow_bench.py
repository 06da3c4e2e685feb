#!/usr/bin/env python3
"""Cost of shadow mode on the serving pipeline. Prints one JSON object.

    .venv/bin/python tools/bench/shadow_bench.py --out bench/results/shadow-cpu.json
    .venv/bin/python tools/bench/shadow_bench.py --device cuda:0 --streams 16 --out bench/results/h200-shadow.json

NanoDet-m 1.0.0 (416 px, 80 classes) serves S live synthetic streams at F fps (test pattern, live: the
sources drop the oldest frame when the pipeline falls behind); NanoDet-m 2.0.0 (320 px, 6 classes, built
by tools/models/build_nanodet_320.py into a temporary directory) runs in shadow. In one process, one after
the other, each for ``--seconds`` after ``--warmup`` seconds: a control run without a shadow, then
``--repeats`` rounds of one run per sample rate (default 1/30, 1/10, 1/1) and a control run (the load of a
shared machine drifts: each shadow run sits between two control runs).
Each run reports frames in, results, drops, fps, the worst stream's p95 capture-to-result latency, the
infer stage's p50, CPU seconds per result, and the shadow's own counts (sampled, compared, dropped by
its queue, skipped by its busy budget, busy ratio, candidate latency); ``fps_vs_control``,
``dropped_ratio_minus_control`` and ``cpu_per_result_vs_control`` compare each run with the mean of the
two control runs around it, and ``summary`` averages them per rate.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import emit, load, machine  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

from tests.support.shadow_load import compare  # noqa: E402
from tests.support.track_swap import build_v2  # noqa: E402


def _rate(text: str) -> float:
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate such as 1/30 or 0.1") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"a sample rate is in (0, 1], got {text}")
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda:N")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=15.0, help="measured time per run")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds before each run's measurement")
    ap.add_argument("--rates", type=_rate, nargs="+", default=[_rate("1/30"), _rate("1/10"), 1.0])
    ap.add_argument("--max-busy", type=float, default=0.5, help="the shadow's busy budget (ShadowConfig)")
    ap.add_argument("--repeats", type=int, default=2, help="rounds of (every rate, then a control run)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not 0 < args.max_busy <= 1:
        ap.error("--max-busy must be in (0, 1]")
    if args.streams < 1 or args.seconds <= 0:
        ap.error("--streams must be >= 1 and --seconds > 0")
    started = load()
    with tempfile.TemporaryDirectory(prefix="shadow-bench-") as tmp:
        v2 = build_v2(Path(tmp) / "nanodet-m-320")
        result = compare(
            v2,
            list(args.rates),
            streams=args.streams,
            fps=args.fps,
            width=args.width,
            height=args.height,
            seconds=args.seconds,
            warmup_s=args.warmup,
            max_busy=args.max_busy,
            device=args.device,
            max_batch=args.max_batch,
            repeats=args.repeats,
        )
    emit(
        {
            "bench": "shadow",
            "command": " ".join(["tools/bench/shadow_bench.py", *sys.argv[1:]]),
            "machine": machine(),
            "load_at_start": started,
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "serving": "nanodet-m:1.0.0",
            "candidate": "nanodet-m:2.0.0",
            **result,
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
