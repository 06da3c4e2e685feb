"""Host NMS cost for crowded frames: the blocked NMS the decoders use against the textbook loop, side by
side on the same candidates (prints one JSON document).

    python tools/bench/nms_bench.py [--out FILE]

Candidates: random boxes 4..60 px in a 320 px square (a crowd), scores uniform, 1 or 80 classes; the
decoders' defaults (IoU 0.45, at most 100 detections, at most 1000 candidates before NMS).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from edgefleet.sdk._decoders._nms import nms, nms_simple


def _crowd(rng: np.random.Generator, n: int, classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    centre = rng.uniform(0, 320, (n, 2))
    size = rng.uniform(4, 60, (n, 2))
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1).astype(np.float32)
    return boxes, rng.uniform(0.25, 1, n).astype(np.float32), rng.integers(0, classes, n)


def _ms(fn: object, args: tuple[object, ...], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return round(best * 1e3, 3)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    cells = []
    for n in (30, 100, 300, 1000):
        for classes in (1, 80):
            boxes, scores, cls = _crowd(rng, n, classes)
            call = (boxes, scores, cls, 0.45, 100)
            kept = nms(*call)
            assert kept.tolist() == nms_simple(*call).tolist()
            simple, blocked = _ms(nms_simple, call, args.repeats), _ms(nms, call, args.repeats)
            cells.append(
                {
                    "candidates": n,
                    "classes": classes,
                    "kept": int(kept.size),
                    "simple_ms": simple,
                    "blocked_ms": blocked,
                    "speedup": round(simple / blocked, 2) if blocked else None,
                }
            )
    doc = {
        "command": "python tools/bench/nms_bench.py " + " ".join(argv),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "timing": f"best of {args.repeats} per cell",
        "results": cells,
    }
    text = json.dumps(doc, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
