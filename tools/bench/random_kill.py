#!/usr/bin/env python3
"""Random-kill benchmark: a real controller and a real agent on loopback; the agent is SIGKILLed at a
random point of download, verify, install, swap, inside the health window or at its end, again and
again (after a kill in the window it stays dead, half the time, until the controller's window is over).
After every kill the model store is checked (every installed package re-verifies, every partial download
is a prefix of its artifact, state.json parses and points at verified packages); after every restart,
that the agent serves its last-good version and that it verifies. Every rollout is followed to its end:
it must converge (completed, the device serving the version and holding it as last-good) or end
aborted with a reason. Prints one JSON object.

    .venv/bin/python tools/bench/random_kill.py --kills 50 --versions 25 --out bench/results/random-kill.json
    .venv/bin/python tools/bench/random_kill.py --kills 20            # quicker

The harness is tests/support/random_kill.py (also used by tests/integration/test_random_kill.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import load, machine  # noqa: E402

from tests.support.random_kill import RandomKill  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--versions", type=int, default=4, help="padded packages rolled out in turn")
    ap.add_argument("--padding-mb", type=float, default=3.0, help="random bytes added to each package")
    ap.add_argument(
        "--rate-kbps", type=float, default=32000.0, help="the agent's download_rate_limit_kbps (kilobits/s)"
    )
    ap.add_argument("--health-window", type=float, default=2.0, help="each rollout's health window (s)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgefleet-random-kill-") as tmp:
        rk = RandomKill(
            Path(tmp),
            seed=args.seed,
            versions=args.versions,
            padding_bytes=int(args.padding_mb * 1e6),
            rate_limit_kbps=args.rate_kbps,
            health_window_s=args.health_window,
            say=None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)),
        )
        try:
            result = rk.run(args.kills)
        finally:
            rk.close()
    out = {
        "benchmark": "random-kill",
        "command": "tools/bench/random_kill.py " + " ".join(sys.argv[1:]),
        "seed": args.seed,
        **result,
        "ok": not result["failures"]
        and result["restarts"] == result["restarts_on_verified_version"]
        and result["rollouts_completed_not_converged"] == 0,
        "machine": machine(),
        "load_after": load(),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
