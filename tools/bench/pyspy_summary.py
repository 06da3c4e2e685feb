"""Summarise a ``py-spy record --gil --threads --format raw`` profile: where the GIL was held, by thread
(source threads and inference workers folded together) and by innermost frame.

    py-spy record --gil --threads --format raw -o gil.txt -- python tools/bench/gpu_bench.py ...
    python tools/bench/pyspy_summary.py gil.txt [--top 25]
    python tools/bench/pyspy_summary.py --child child-pyspy.txt   # of py-spy record --subprocesses
    python tools/bench/pyspy_summary.py --thread edgefleet-post gil.txt --top 40
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


def summarise_thread(path: Path, top: int, thread: str) -> list[str]:
    """One thread of a ``--gil --threads`` profile: its samples by frame, inclusive (each frame counted
    once per sample), as shares of every sample with the GIL held."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = mine = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        if thread not in frames[0]:
            continue
        mine += n
        for f in set(frames[1:]):
            inclusive[f] += n
    out = [f"{thread}: {mine} of {total} samples with the GIL held ({mine / max(1, total):.1%})", "-- inclusive"]
    out += [f"{v:6d} {v / max(1, total):6.1%}  {k}" for k, v in inclusive.most_common(top)]
    return out


def summarise_child(path: Path, top: int) -> list[str]:
    """The analytics process's main thread in a ``py-spy record --subprocesses --threads --format raw``
    profile (its command line spans lines there): samples by frame, inclusive and innermost."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r'process (\d+):"[^"\n]*-c \n[^;]*?_analytics\._worker', text)
    if found is None:
        raise SystemExit(f"{path}: no analytics process in this profile (recorded with --subprocesses?)")
    pid = found.group(1)
    inclusive: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for m in re.finditer(rf'process {pid}:".*?";thread \({pid}\)[^;\n]*;([^\n]*?) (\d+)\n', text, re.S):
        frames, n = m.group(1).split(";"), int(m.group(2))
        total += n
        leaves[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    out = [f"analytics process {pid}: {total} samples (running, not idle)", "-- inclusive"]
    out += [f"{v / total:6.1%}  {k}" for k, v in inclusive.most_common(top)]
    out.append("-- innermost frames")
    out += [f"{v / total:6.1%}  {k}" for k, v in leaves.most_common(top)]
    return out


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--child", action="store_true", help="the analytics process of a --subprocesses profile")
    ap.add_argument("--thread", help="one thread's frames (a part of its name, e.g. edgefleet-post)")
    args = ap.parse_args(argv)
    if not args.profile.is_file():
        raise SystemExit(f"{args.profile}: no such file")
    if args.thread:
        lines = summarise_thread(args.profile, args.top, args.thread)
    else:
        lines = (summarise_child if args.child else summarise)(args.profile, args.top)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
