#!/usr/bin/env python3
"""Shadow agreement of the NanoDet-m candidates with 1.0.0 on the committed clip. Prints one JSON object.

    .venv/bin/python tools/bench/shadow_agreement.py --out bench/results/shadow-agreement.json

1.0.0 (416 px, 80 classes) serves the 300 frames of models/media/vtest-300.mp4; each candidate in turn
runs in shadow on ``--sample-rate`` of them (no busy budget): 2.0.0 (320 px, 6 classes), 2.0.1 (its label
names rotated among the kept classes) and 2.0.2 (a score threshold that sees nothing), built into a
temporary directory by tests/support/shadow_models.py. Each entry is the run's ``Agreement.to_dict()``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import emit, load, machine  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

from edgefleet.sdk import Pipeline  # noqa: E402
from tests.support.shadow_models import V1, blind, build_v2, shuffled  # noqa: E402
from tests.support.track_swap import CLIP  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample-rate", type=float, default=0.25)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not 0 < args.sample_rate <= 1:
        ap.error("--sample-rate must be in (0, 1]")
    started = load()
    out = {}
    with tempfile.TemporaryDirectory(prefix="shadow-agreement-") as tmp:
        v2 = build_v2(Path(tmp) / "v2")
        for name, pkg in (("2.0.0", v2), ("2.0.1-labels-rotated", shuffled(v2, Path(tmp) / "s")),
                          ("2.0.2-sees-nothing", blind(v2, Path(tmp) / "b"))):  # fmt: skip
            with Pipeline(V1, [f"cam0={CLIP}"], device=args.device) as p:
                run = p.shadow(pkg, {"sample_rate": args.sample_rate, "max_busy": 1.0, "queue": 64})
                for _ in p.results(timeout=300):
                    pass
                run.wait_frames(int(300 * args.sample_rate), 120.0)
                out[name] = run.stop().to_dict()
    emit(
        {
            "bench": "shadow-agreement",
            "command": " ".join(["tools/bench/shadow_agreement.py", *sys.argv[1:]]),
            "machine": machine(),
            "load_at_start": started,
            "serving": "nanodet-m:1.0.0",
            "clip": "models/media/vtest-300.mp4",
            "candidates": out,
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
