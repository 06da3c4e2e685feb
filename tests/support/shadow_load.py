"""The cost of shadow mode on a serving pipeline under live load: the same pipeline (S live synthetic
streams at F fps, NanoDet-m 1.0.0 serving) run for a fixed time without a shadow (the control) and with
a candidate in shadow at each sample rate, one after the other in one process, and what each run
delivered: frames in, results, frames dropped by the live sources (they drop the oldest when the
pipeline falls behind), fps, capture-to-result latency, CPU seconds per result, and the shadow's own
counts. Used by tests/integration/test_shadow_load.py and tools/bench/shadow_bench.py."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

from edgefleet.sdk import Pipeline

from .track_swap import V1


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _discard(result: Any) -> None:
    """The results' consumer: takes each result and lets it go."""


def one_run(
    candidate: Path | None,
    rate: float,
    *,
    streams: int = 4,
    fps: float = 30.0,
    width: int = 640,
    height: int = 480,
    seconds: float = 10.0,
    warmup_s: float = 3.0,
    max_busy: float = 0.5,
    device: str = "cpu",
    max_batch: int = 4,
    serving: Path = V1,
) -> dict[str, Any]:
    """One timed run; ``candidate`` None (or ``rate`` 0): the control run without a shadow."""
    sources = [f"cam{i}=synthetic:?width={width}&height={height}&fps={fps:g}" for i in range(streams)]
    # results are consumed as an app would (a callback that drops them): a result nobody takes holds its
    # frame's slot, and with device frame pools (cuda) the sources would then drop every frame
    with Pipeline(serving, sources, device=device, max_batch=max_batch, on_result=_discard) as p:
        run = None
        if candidate is not None and rate > 0:
            run = p.shadow(candidate, {"sample_rate": rate, "max_busy": max_busy})
        time.sleep(warmup_s)
        s0, c0, t0 = p.stats(), _cpu_s(), time.monotonic()
        time.sleep(seconds)
        s1, c1, t1 = p.stats(), _cpu_s(), time.monotonic()
        shadow = run.stop().to_dict() if run is not None else None
    frames_in, results = s1.frames_in - s0.frames_in, s1.results - s0.results
    dropped = s1.dropped - s0.dropped
    lat = [s.latency_p95_ms for s in s1.streams.values()]
    out: dict[str, Any] = {
        "sample_rate": rate,
        "seconds": round(t1 - t0, 2),
        "offered_fps": streams * fps,
        "frames_in": frames_in,
        "results": results,
        "dropped": dropped,
        "dropped_ratio": dropped / max(frames_in, 1),  # frames_in counts the dropped ones too
        "fps": results / (t1 - t0),
        "latency_p95_ms_worst_stream": max(lat, default=0.0),
        "infer_p50_ms": s1.stages["infer"].p50_ms,
        "cpu_s_per_result": (c1 - c0) / max(results, 1),
    }
    if shadow is not None:
        keys = (
            "sampled",
            "frames",
            "dropped",
            "skipped_budget",
            "busy_ratio",
            "latency_p50_ms",
            "latency_p95_ms",
            "f1",
        )
        out["shadow"] = {k: shadow[k] for k in keys}
    return out


def compare(candidate: Path, rates: list[float], *, repeats: int = 1, **kw: Any) -> dict[str, Any]:
    """A control run, then ``repeats`` rounds of one run per rate followed by a control run (the load of a
    shared machine drifts: each rate sits between two controls). ``summary``: per rate, the means over
    its runs, and each run's ratio to the mean of the two control runs around it."""
    runs = [one_run(None, 0.0, **kw)]
    for _ in range(max(1, repeats)):
        runs += [one_run(candidate, r, **kw) for r in rates]
        runs.append(one_run(None, 0.0, **kw))
    controls = [i for i, r in enumerate(runs) if r["sample_rate"] == 0]
    for i, r in enumerate(runs):
        before = max(c for c in controls if c <= i)
        after = min(c for c in controls if c >= i)
        ref = [runs[before], runs[after]]
        fps = sum(c["fps"] for c in ref) / 2
        r["fps_vs_control"] = r["fps"] / fps if fps else 0.0
        r["dropped_ratio_minus_control"] = r["dropped_ratio"] - sum(c["dropped_ratio"] for c in ref) / 2
        cpu = sum(c["cpu_s_per_result"] for c in ref) / 2
        r["cpu_per_result_vs_control"] = r["cpu_s_per_result"] / cpu if cpu else 0.0
    summary = {}
    for rate in [0.0, *rates]:
        mine = [r for r in runs if r["sample_rate"] == rate]
        summary[f"{rate:.4g}"] = {
            k: sum(r[k] for r in mine) / len(mine)
            for k in ("fps", "dropped_ratio", "fps_vs_control", "dropped_ratio_minus_control", "cpu_s_per_result",
                      "cpu_per_result_vs_control", "latency_p95_ms_worst_stream")
        } | {"runs": len(mine)}  # fmt: skip
    return {"summary": summary, "runs": runs}
