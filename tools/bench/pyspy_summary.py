"""Summarise a ``py-spy record --gil --threads --format raw`` profile: where the GIL was held, by thread
(source threads and inference workers folded together) and by innermost frame.

    py-spy record --gil --threads --format raw -o gil.txt -- python tools/bench/gpu_bench.py ...
    python tools/bench/pyspy_summary.py gil.txt [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path


def summarise(path: Path, top: int) -> list[str]:
    threads: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[tuple[str, str]] = collections.Counter()
    total = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        name = re.sub(r"thread \(\d+\):? ?", "", frames[0]) or "main"
        name = re.sub(r"source-\S+", "source-*", name)
        name = re.sub(r"edgefleet-infer\d+", "edgefleet-infer*", name)
        threads[name] += n
        leaves[(name, frames[-1])] += n
        total += n
    out = [f"samples with the GIL held: {total}"]
    out += [f"{v / total:6.1%}  {k}" for k, v in threads.most_common()]
    out.append("-- innermost frames")
    out += [f"{v / total:6.1%}  {t} | {leaf}" for (t, leaf), v in leaves.most_common(top)]
    return out


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    if not args.profile.is_file():
        raise SystemExit(f"{args.profile}: no such file")
    print("\n".join(summarise(args.profile, args.top)))


if __name__ == "__main__":
    main(sys.argv[1:])
