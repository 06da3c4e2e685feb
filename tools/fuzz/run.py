"""Run the property-based fuzz targets (tests/unit/fuzz) for a time budget.

    .venv/bin/python tools/fuzz/run.py --minutes 10 [-k archive]

Each round runs every target with more examples than CI does and a fresh seed; it stops at the first
failure (hypothesis prints the shrunk input) or when the budget is spent. Exit status: pytest's."""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0, help="time budget")
    ap.add_argument("--examples", type=int, default=2000, help="examples per target per round")
    ap.add_argument("-k", default="", help="only targets matching this pytest -k expression")
    args = ap.parse_args()
    deadline = time.monotonic() + args.minutes * 60
    rounds = 0
    while time.monotonic() < deadline:
        seed = random.randrange(1 << 31)
        env = {**os.environ, "EDGEFLEET_FUZZ_EXAMPLES": str(args.examples)}
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            f"--hypothesis-seed={seed}",
            "tests/unit/fuzz",
        ] + (["-k", args.k] if args.k else [])
        rounds += 1
        print(f"round {rounds}: seed {seed}, {args.examples} examples per target", flush=True)
        rc = subprocess.call(cmd, cwd=ROOT, env=env)
        if rc != 0:
            print(f"failure in round {rounds} (seed {seed}); rerun with --hypothesis-seed={seed}")
            return rc
    print(f"{rounds} round(s), no failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
