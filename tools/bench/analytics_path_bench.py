#!/usr/bin/env python3
"""Analytics on a pipeline whose inference costs nothing: the H200's regime, on this CPU. Prints one JSON.

    .venv/bin/python tools/bench/analytics_path_bench.py --out bench/results/analytics-path-cpu.json

On the H200 the inference of a batch of 32 takes ~12 ms of GPU time and releases the GIL, so what limits
a 64-stream pipeline is the Python work around it (decode, preprocessing glue, results, analytics,
sinks), all under one GIL. A CPU pipeline cannot show that: its inference saturates the cores. Here the
model is NanoDet-m, but its backend replays the output tensors the real model produced on the
committed clip (recorded once, in this run, with ``keep_raw``) instead of running it: preprocessing,
batching, decoding, the analytics and the sinks are all real, the inference is free. The sources are
synthetic frames of the clip's size (768x576, so boxes map back the same), S streams, batch B; every row
of a batch gets the clip's next frame's outputs (the streams all show the clip, as gpu_bench runs it).

Five settings, interleaved ``--repeats`` times so a change in the machine's load hits each alike:
``without`` analytics, ``with`` ``[track, zones]`` (gpu_bench's zone and line) on their own thread (the
default), ``with_inline`` the same on the decoding thread (``analytics_thread=False``), ``with_process``
the same in the analytics process (``analytics_process=True``) called from the result thread beside the
decoding, ``with_process_inline`` the analytics process called from the decoding thread, which decodes
the next waiting batch while the process works (``analytics_thread=False``: the default with
``analytics_process``). Figures: fps over the whole run, the
pipeline process's CPU time per frame and the analytics process's; the medians; how much slower each analytics setting
is than ``without``. Every wait is bounded (the pipeline's own).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import emit, load, machine  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

from edgefleet.sdk import OnnxRuntimeConfig, Pipeline, register_backend  # noqa: E402
from edgefleet.sdk._backends._onnxruntime import OnnxRuntimeBackend  # noqa: E402

MODEL = ROOT / "models" / "nanodet-m"
CLIP = ROOT / "models" / "media" / "vtest-300.mp4"
ZONES = {  # gpu_bench's ANALYTICS["track"]
    "type": "zones",
    "zones": [{"name": "left", "points": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], "normalized": True}],
    "lines": [{"name": "middle", "points": [[0.5, 0], [0.5, 1]], "normalized": True}],
}
_RECORDED: list[dict[str, np.ndarray]] = []  # the real model's outputs, one dict per clip frame


class ReplayConfig(OnnxRuntimeConfig):  # type: ignore[misc]
    type: Literal["bench-replay"] = "bench-replay"  # type: ignore[assignment]


class ReplayBackend(OnnxRuntimeBackend):  # type: ignore[misc]
    """The real model loaded (its specs, buffers), its inference replaced by the recorded outputs."""

    concurrent_infer = False

    def __init__(self, config: ReplayConfig, device: str) -> None:
        super().__init__(config, device)
        self._next = 0

    def infer(self, buffer: Any, n: int) -> dict[str, np.ndarray]:
        frame = _RECORDED[self._next % len(_RECORDED)]
        self._next += 1
        return {k: np.repeat(v[None], n, axis=0) for k, v in frame.items()}


def record() -> int:
    """The real model's outputs on every frame of the clip (one stream, in order)."""
    with Pipeline(MODEL, [f"cam={CLIP}"], max_batch=1, keep_raw=True) as p:
        for r in p.results():
            if r.raw is None:
                raise SystemExit("keep_raw gave no output tensors")
            _RECORDED.append({k: np.array(v) for k, v in r.raw.items()})
    return len(_RECORDED)


def run_once(streams: int, batch: int, frames: int, setting: str) -> dict[str, float]:
    analytics: list[dict[str, Any]] = [] if setting == "without" else [{"type": "track"}, ZONES]
    # unpaced (9999 fps: a synthetic source's default is 30 fps: on an idle machine 16 streams then cap it at 480 fps)
    sources = [f"cam{i}=synthetic:?width=768&height=576&frames={frames}&fps=9999&live=false" for i in range(streams)]
    p = Pipeline(
        MODEL,
        sources,
        backend=ReplayConfig(),
        max_batch=batch,
        infer_workers=1,
        analytics=analytics,
        analytics_thread=setting not in ("with_inline", "with_process_inline"),
        analytics_process=setting.startswith("with_process"),
        on_result=lambda r: None,
    )
    c0 = time.process_time()
    k0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    stats = p.run()
    cpu = time.process_time() - c0
    k1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the analytics process, waited for at the end
    child = (k1.ru_utime - k0.ru_utime) + (k1.ru_stime - k0.ru_stime)
    st = stats.stages
    return {
        "fps": round(stats.fps, 1),
        "cpu_ms_per_frame": round(cpu / stats.results * 1000, 4),
        "analytics_process_cpu_ms_per_frame": round(child / stats.results * 1000, 4),
        "detections_per_frame": round(sum(stats.detections_by_label.values()) / stats.results, 2),
        "mean_batch": round(stats.mean_batch, 2),
        **{f"{k}_ms_per_batch_p50": round(st[k].p50_ms, 3) for k in ("postprocess", "analytics", "sinks")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--frames", type=int, default=300, help="per stream")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    register_backend("bench-replay", ReplayConfig, ReplayBackend, replace=True)
    result: dict[str, Any] = {
        "bench": "analytics-path",
        "command": " ".join(sys.argv),
        "machine": machine(),
        "load_at_start": load(),
        "streams": args.streams,
        "batch": args.batch,
        "frames_per_stream": args.frames,
        "recorded_frames": record(),
    }
    settings = ("without", "with", "with_inline", "with_process", "with_process_inline")
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in settings}
    for _ in range(args.repeats):
        for s in settings:
            runs[s].append(run_once(args.streams, args.batch, args.frames, s))
            print(f"{s}: {runs[s][-1]}", file=sys.stderr)
    med = {s: {k: float(np.median([r[k] for r in v])) for k in v[0]} for s, v in runs.items()}
    base = med["without"]
    result["runs"] = runs
    result["median"] = med
    for s in settings[1:]:
        result[f"{s}_fps_slower_pct"] = round((1 - med[s]["fps"] / base["fps"]) * 100, 2)
        result[f"{s}_cpu_per_frame_more_pct"] = round(
            (med[s]["cpu_ms_per_frame"] / base["cpu_ms_per_frame"] - 1) * 100, 2
        )
    result["goal"] = "<= 5 % slower"
    emit(result, args.out)


if __name__ == "__main__":
    main()
