#!/usr/bin/env python3
"""Live changes under load: N live synthetic cameras in one pipeline while cameras, a sink and the zones
stage are added, replaced and removed, beside a control pipeline of the same cameras with no change.
Prints JSON: per pipeline the untouched streams' sequence gaps and drops, results, thread and RSS (and on
cuda, GPU memory) before and after, and how long each kind of operation took. Per cycle, beside the RSS:
the frame-pool memory alive in the process (``frame_mb``, ``frame_pools``: every slot counted until its
last reference goes), what of it the two pipelines' sources hold (``owned``) and the rest (``unowned``:
removed sources' pools not freed yet; 0 when removal frees them), and the full garbage collections so
far; on cuda, the pinned blocks of gone pools kept for reuse (``pinned_cached_mb``, freed gradually by
a reaper: ``pinned_freed_blocks``). RSS that grows while these stay flat is not our frame memory.

    .venv/bin/python tools/bench/live_changes_bench.py --streams 8 --fps 30 --cycles 4
    .venv/bin/python tools/bench/live_changes_bench.py --model models/nanodet-m --device cuda:0 \\
        --streams 16 --fps 30 --width 1280 --height 720 --cycles 10 --out bench/results/live-changes-h200.json

Each cycle is 6 operations: add a camera, replace it (new size), add a JSONL sink, replace the zones
stage, remove the sink, remove the camera. The model defaults to a small generated detector
(tests/support/onnx_models.py) so that the CPU is not what limits the run.
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "bench"))

from _harness import emit, load, machine  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

ZONES = [
    {"type": "zones", "zones": [{"name": "a", "points": [[0, 0], [30, 0], [30, 30]]}]},
    {"type": "zones", "zones": [{"name": "b", "points": [[0, 0], [60, 0], [60, 40]]}]},
]


class Recorder:
    def __init__(self) -> None:
        self.seqs: dict[str, list[int]] = collections.defaultdict(list)
        self.lock = threading.Lock()

    def __call__(self, r: Any) -> None:
        with self.lock:
            self.seqs[r.stream_id].append(r.sequence)


def gaps(seqs: list[int]) -> int:
    return sum(1 for a, b in itertools.pairwise(seqs) if b != a + 1)


def gpu_used_mb(device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    try:
        import pynvml  # type: ignore[import-untyped,unused-ignore]

        pynvml.nvmlInit()
        index = int(device.split(":")[1]) if ":" in device and device.split(":")[1].isdigit() else 0
        info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
        return round(info.used / 2**20, 1)
    except Exception:
        return None


def frame_memory(*pipelines: Any) -> dict[str, Any]:
    """The process's live frame pools (MB, pools, slots) and the MB of them the pipelines' sources hold."""
    from edgefleet.sdk._frames import live_frame_memory

    alive = live_frame_memory()
    owned = sum(p.stats().frame_memory["bytes"] for p in pipelines)
    return {
        "frame_mb": round(alive.bytes / 2**20, 1),
        "frame_pools": alive.pools,
        "frame_slots": alive.slots,
        "frame_owned_mb": round(owned / 2**20, 1),
        "frame_unowned_mb": round((alive.bytes - owned) / 2**20, 1),
        "gc_full_collections": gc.get_stats()[2]["collections"],
        **_pinned_cache(),
    }


def _pinned_cache() -> dict[str, Any]:
    """On cuda: the pinned blocks of gone pools kept for reuse (MB) and those given back so far."""
    import sys

    memory = sys.modules.get("edgefleet.sdk._cuda._memory")
    if memory is None:
        return {}
    cache = memory.PINNED_CACHE
    return {"pinned_cached_mb": round(cache.stats().nbytes / 2**20, 1), "pinned_freed_blocks": cache.freed}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import psutil  # type: ignore[import-untyped,unused-ignore]

    from edgefleet.sdk import Pipeline

    proc = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="edgefleet-live-") as tmp:
        model = args.model
        if model is None:
            from tests.support.onnx_models import yolo_package

            model = yolo_package(Path(tmp) / "model")
        cam = f"synthetic:?width={args.width}&height={args.height}&fps={args.fps}&queue={args.queue}"
        cams = [f"c{i}={cam}" for i in range(args.streams)]
        live, ctl = Recorder(), Recorder()

        def make(rec: Recorder) -> Any:
            return Pipeline(
                model, cams, on_result=rec, device=args.device, max_batch=args.max_batch,
                analytics=[{"type": "track"}, ZONES[0]],
            )  # fmt: skip

        p, control = make(live).start(), make(ctl).start()
        timings: dict[str, list[float]] = collections.defaultdict(list)
        try:
            time.sleep(args.warmup_s)
            before = {"threads": threading.active_count(), "rss_mb": proc.memory_info().rss / 2**20}
            before["gpu_used_mb"] = gpu_used_mb(args.device)
            before |= frame_memory(p, control)
            rss, frames = [], []
            for cycle in range(args.cycles):
                x = f"x{cycle}"
                steps = [
                    ("add_source", lambda x=x: p.add_source(f"{x}={cam}")),
                    ("replace_source", lambda x=x: p.replace_source(x, cam.replace(f"width={args.width}", "width=96"))),
                    ("add_sink", lambda c=cycle: p.add_sink({"type": "jsonl", "path": f"{tmp}/o{c}.jsonl"}, name="o")),
                    ("replace_analytics", lambda c=cycle: p.replace_analytics("zones", ZONES[(c + 1) % 2])),
                    ("remove_sink", lambda: p.remove_sink("o")),
                    ("remove_source", lambda x=x: p.remove_source(x)),
                ]  # fmt: skip
                for name, step in steps:
                    t0 = time.perf_counter()
                    step()
                    timings[name].append(time.perf_counter() - t0)
                    time.sleep(args.pause_s)
                rss.append(proc.memory_info().rss / 2**20)
                frames.append(frame_memory(p, control))
            after = {"threads": threading.active_count(), "rss_mb": proc.memory_info().rss / 2**20}
            after["gpu_used_mb"] = gpu_used_mb(args.device)
            after |= frame_memory(p, control)
        finally:
            for q in (p, control):
                q.stop()
            for q in (p, control):
                q.close()
        untouched = [f"c{i}" for i in range(args.streams)]

        def figures(pipe: Any, rec: Recorder) -> dict[str, Any]:
            st = pipe.stats()
            return {
                "results": st.results,
                "fps": round(st.fps, 1),
                "dropped": st.dropped,
                "untouched_gaps": sum(gaps(rec.seqs[s]) for s in untouched),
                "untouched_results": sum(len(rec.seqs[s]) for s in untouched),
                "untouched_start_at_0": all(rec.seqs[s][:1] == [0] for s in untouched),
            }

        return {
            "bench": "live-changes",
            "machine": machine(),
            "command": " ".join(sys.argv),
            "streams": args.streams,
            "fps": args.fps,
            "size": f"{args.width}x{args.height}",
            "device": args.device,
            "operations": sum(len(v) for v in timings.values()),
            "live": figures(p, live),
            "control": figures(control, ctl),
            "before": before,
            "after": after,
            "rss_mb_per_cycle": [round(r, 1) for r in rss],
            "frame_memory_per_cycle": {k: [f[k] for f in frames] for k in (frames[0] if frames else {})},
            "op_ms": {
                k: {"median": round(sorted(v)[len(v) // 2] * 1000, 1), "max": round(max(v) * 1000, 1)}
                for k, v in timings.items()
            },
            "note": "remove_source waits for the stream's last queued frame's result; "
            "replace_source is a remove then an add",
            "load": load(),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--height", type=int, default=48)
    ap.add_argument("--queue", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--pause-s", type=float, default=0.3)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    emit(run(args), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
