"""Host NMS cost, side by side on the same candidates (prints one JSON document).

    python tools/bench/nms_bench.py [--out FILE]

``frames``: one frame's candidates, random boxes 4..60 px in a 320 px square (a crowd), scores uniform, 1
or 80 classes, the decoders' defaults (IoU 0.45, at most 100 detections): the textbook loop against
``nms`` forced onto each of its two ways (all same-class pairs at once, or blocks of 64).
``batches``: a batch of 32 such frames, one ``nms`` call per frame (the shape of the decoders' loop
before) against one ``nms_groups`` call for the whole batch (how they work now), at most 100 a frame.
Every cell checks that the results are identical before it times them.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from edgefleet.sdk._decoders import _nms
from edgefleet.sdk._decoders._nms import nms, nms_groups, nms_simple


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
    default_pairs = _nms._PAIRS_UP_TO

    def forced(limit: int) -> object:
        def run(*call: object) -> object:
            _nms._PAIRS_UP_TO = limit
            try:
                return nms(*call)  # type: ignore[arg-type]
            finally:
                _nms._PAIRS_UP_TO = default_pairs

        return run

    pairs, blocks = forced(1 << 62), forced(0)
    cells = []
    for n in (30, 100, 300, 1000):
        for classes in (1, 80):
            boxes, scores, cls = _crowd(rng, n, classes)
            call = (boxes, scores, cls, 0.45, 100)
            kept = nms(*call)
            want = nms_simple(*call).tolist()
            assert kept.tolist() == want == pairs(*call).tolist() == blocks(*call).tolist()  # type: ignore[attr-defined]
            simple = _ms(nms_simple, call, args.repeats)
            cell = {"candidates": n, "classes": classes, "kept": int(kept.size), "simple_ms": simple}
            for name, fn in (("pairs_ms", pairs), ("blocks_ms", blocks), ("nms_ms", nms)):
                cell[name] = _ms(fn, call, args.repeats)
            cell["speedup_nms"] = round(simple / cell["nms_ms"], 2) if cell["nms_ms"] else None
            cells.append(cell)
    batches = []
    for per_frame, classes in ((10, 80), (50, 80), (50, 1), (200, 80), (200, 1)):
        frames = [_crowd(rng, per_frame, classes) for _ in range(32)]
        frame = np.repeat(np.arange(32), per_frame)
        boxes = np.concatenate([f[0] for f in frames])
        scores = np.concatenate([f[1] for f in frames])
        groups = frame * classes + np.concatenate([f[2] for f in frames])
        one = nms_groups(boxes, scores, groups, 0.45, 100)
        for i, f in enumerate(frames):  # each frame's best 100 kept: what nms on the frame alone keeps
            kept = np.flatnonzero(one[i * per_frame : (i + 1) * per_frame])
            best = kept[np.argsort(-f[1][kept], kind="stable")][:100]
            assert best.tolist() == nms(*f, 0.45, 100).tolist()
        loop = _ms(lambda fs=frames: [nms(*f, 0.45, 100) for f in fs], (), args.repeats)
        whole = _ms(nms_groups, (boxes, scores, groups, 0.45, 100), args.repeats)
        batches.append(
            {
                "frames": 32,
                "candidates_per_frame": per_frame,
                "classes": classes,
                "per_frame_calls_ms": loop,
                "whole_batch_ms": whole,
                "speedup": round(loop / whole, 2) if whole else None,
            }
        )
    doc = {
        "command": "python tools/bench/nms_bench.py " + " ".join(argv),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "timing": f"best of {args.repeats} per cell",
        "frames": cells,
        "batches": batches,
    }
    text = json.dumps(doc, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
