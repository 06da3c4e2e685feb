#!/usr/bin/env python3
"""Summarise gpu_bench pipeline cells run as interleaved pairs (``gpu_session.sh pairs`` or ``trees``).
Prints one JSON.

    python3 tools/bench/pairs_summary.py bench/results/h100-analytics-replay-pairs-2.json
    # two SDKs alternated on one host (gpu_session.sh trees): one group per name prefix
    python3 tools/bench/pairs_summary.py --group old='trees-old-*.json' --group new='trees-new-*.json'

In each file, the k-th cell without analytics (``"analytics": "none"``) is paired with the k-th cell
with them, in file order: the cells of a pair ran one after the other on the same host. Per group: each
pair's frames/s (none, with) and change in %, the median pair, the medians of each side, and the
figures that explain a change (median inference p50 a batch, the result thread's CPU µs a frame, the
inference loop's wait for the result thread, ms a batch). A group's pairs come from all its files.
Cells that differ only by a gpu_bench option given per cell (``--result-yield 0,8``) carry nothing that
tells them apart: summarise such files by hand.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
from pathlib import Path
from typing import Any

__all__ = ["pairs", "summary"]


def pairs(cells: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The file's pipeline cells as (none, with analytics) pairs, k-th with k-th."""
    pipeline = [c for c in cells if c.get("suite", "pipeline") == "pipeline" and "fps" in c]
    none = [c for c in pipeline if c.get("analytics") == "none"]
    with_ = [c for c in pipeline if c.get("analytics") != "none"]
    return list(zip(none, with_, strict=False))


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _post_us(cell: dict[str, Any]) -> float | None:
    per_1000 = cell.get("cpu", {}).get("cpu_s_per_1000_frames", {}).get("edgefleet-post")
    return None if per_1000 is None else per_1000 * 1000.0


def _side(cells: list[dict[str, Any]]) -> dict[str, Any]:
    def pick(get: Any) -> list[float]:
        return [v for v in (get(c) for c in cells) if v is not None]

    return {
        "fps_median": _median(pick(lambda c: c["fps"])),
        "infer_p50_ms_median": _median(pick(lambda c: c.get("stage_ms_p50_per_batch", {}).get("infer"))),
        "result_thread_cpu_us_per_frame_median": _median(pick(_post_us)),
        "infer_wait_for_result_thread_ms_per_batch_median": _median(
            pick(lambda c: c.get("infer_waits", {}).get("ms_per_batch", {}).get("for_result_thread"))
        ),
    }


def summary(files: list[Path]) -> dict[str, Any]:
    """The pairs of ``files``, and their medians."""
    found: list[tuple[dict[str, Any], dict[str, Any]]] = []
    settings: set[str] = set()
    for path in files:
        for none, with_ in pairs(json.loads(path.read_text(encoding="utf-8")).get("results", [])):
            found.append((none, with_))
            settings.add(with_["analytics"])
    changes = [(w["fps"] - n["fps"]) / n["fps"] * 100.0 for n, w in found if n["fps"]]
    return {
        "files": [str(p) for p in files],
        "analytics": sorted(settings),
        "pairs": [
            {"none_fps": n["fps"], "with_fps": w["fps"], "change_pct": round(ch, 2)}
            for (n, w), ch in zip(found, changes, strict=True)
        ],
        "median_pair_change_pct": _median(changes),
        "none": _side([n for n, _ in found]),
        "with": _side([w for _, w in found]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="pairs files: one group, named 'all'")
    ap.add_argument("--group", action="append", default=[], metavar="NAME=GLOB", help="a named group of files")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()
    groups: dict[str, list[Path]] = {}
    if args.files:
        groups["all"] = list(args.files)
    for item in args.group:
        name, sep, pattern = item.partition("=")
        if not sep or not name:
            ap.error(f"--group {item!r}: give NAME=GLOB")
        groups[name] = [Path(p) for p in sorted(glob.glob(pattern))]
    if not groups:
        ap.error("give pairs files, or --group NAME=GLOB")
    missing = [name for name, paths in groups.items() if not paths]
    if missing:
        ap.error(f"no files for {', '.join(missing)}")
    try:
        out = {name: summary(paths) for name, paths in groups.items()}
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"pairs_summary: {exc}") from None
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
