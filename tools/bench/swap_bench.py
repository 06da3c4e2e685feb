#!/usr/bin/env python3
"""Hot-swap benchmark on this machine's CPU with real ONNX models. Prints one JSON object.

    .venv/bin/python tools/bench/swap_bench.py --out bench/results/swap-cpu.json
    .venv/bin/python tools/bench/swap_bench.py --scenarios toy --agent toy          # quicker

Scenarios (each is a pair of model packages swapped back and forth in a running pipeline):
  toy       tests/support/onnx_models.py: toy-yolo 1.0.0 (64x64, 3 classes) <-> 2.0.0 (96x96, 5 classes)
  nanodet   models/nanodet-m 1.0.0 (416x416, 80 classes) <-> 2.0.0 (320x320, 6 classes), the latter built
            by tools/models/build_nanodet_320.py

For each scenario, in one process (``Pipeline.swap_model``), S synthetic streams at F fps
(``synthetic:?width=640&height=480&fps=F``):
  * swap latency: the ``swap_model`` call -> the first result tagged with the new version;
  * p99 capture->result latency of the results delivered within +-2 s of each cut-over vs the steady
    state before the first swap (goal: at most +33 ms), and where the extra time goes;
  * memory: RSS and glibc heap in use (mallinfo2, which holds ONNX Runtime's CPU arena) after swap 1
    and after swap N (default 50), with the slope over the last 40 swaps.
Agent path (--agent toy|nanodet): a real controller process and a real agent process on loopback;
`deploy` (FleetService.CreateRollout) -> the first result from the new version in the agent's JSONL
sink, with the agent's own steps (received, download, verify, load, warm-up, gate, cut-over) on the way.

Every wait is bounded; all processes started here are stopped here.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil  # type: ignore[import-untyped,unused-ignore]
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
    EDGEFLEET,
    ControllerProcess,
    load,
    machine,
    wait_for,
)

from edgefleet.sdk import Pipeline, Result, SwapReport, generate_signing_key, load_package  # noqa: E402
from tests.support.onnx_models import yolo_package  # noqa: E402

WINDOW_S = 2.0  # the swap window is cut-over +- this
GOAL_MS = 33.0


# --- memory -----------------------------------------------------------------------------------------
class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _mallinfo()


def memory_mb() -> dict[str, float | None]:
    """RSS of this process, and bytes the C heap holds in use (ORT's CPU arena is malloc'd)."""
    gc.collect()
    rss = psutil.Process().memory_info().rss / 2**20
    heap = None
    if _MALLINFO2 is not None:
        mi = _MALLINFO2()
        heap = (mi.uordblks + mi.hblkhd) / 2**20
    return {"rss_mb": round(rss, 2), "heap_in_use_mb": None if heap is None else round(heap, 2)}


# --- packages ---------------------------------------------------------------------------------------
def build_packages(scenario: str, work: Path) -> tuple[Path, Path]:
    if scenario == "toy":
        return (
            yolo_package(work / "toy-1.0.0"),
            yolo_package(work / "toy-2.0.0", version="2.0.0", size=96, labels=("a", "b", "c", "d", "e")),
        )
    if scenario == "nanodet":
        out = work / "nanodet-m-2.0.0"
        script = ROOT / "tools/models/build_nanodet_320.py"
        subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True, timeout=120)
        return ROOT / "models" / "nanodet-m", out
    raise SystemExit(f"unknown scenario {scenario!r} (toy, nanodet)")


def renamed_version(src: Path, dest: Path, version: str) -> Path:
    """A copy of a package under another version (same files; the manifest does not hash itself)."""
    shutil.copytree(src, dest)
    m = dest / "manifest.yaml"
    data = yaml.safe_load(m.read_text())
    data["version"] = version
    data.pop("signature", None)
    m.write_text(yaml.safe_dump(data, sort_keys=False))
    load_package(dest)  # still verifies
    return dest


# --- statistics -------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": pct(values, 50),
        "p95_ms": pct(values, 95),
        "p99_ms": pct(values, 99),
        "max_ms": round(max(values), 2) if values else None,
    }


@dataclass
class Collector:
    """on_result: (delivered at, monotonic; version; capture->result ms; stream; sequence)."""

    rows: list[tuple[float, str, float, str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, r: Result) -> None:
        with self.lock:
            self.rows.append((time.monotonic(), r.model_version, r.latency_ms, r.stream_id, r.sequence))

    def snapshot(self) -> list[tuple[float, str, float, str, int]]:
        with self.lock:
            return list(self.rows)

    def first_of(self, version: str, after: float, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            rows = self.snapshot()
            for t, v, *_ in rows[seen:]:
                if v == version and t >= after:
                    return t
            seen = len(rows)
            time.sleep(0.005)
        return None

    def gaps(self) -> int:
        """Missing or repeated sequence numbers, summed over streams (must be 0)."""
        per: dict[str, list[int]] = {}
        for *_, sid, seq in self.snapshot():
            per.setdefault(sid, []).append(seq)
        bad = 0
        for seqs in per.values():
            bad += sum(1 for a, b in itertools.pairwise(seqs) if b != a + 1)
        return bad


# --- the in-process scenario ------------------------------------------------------------------------
@dataclass
class SwapSample:
    n: int
    to: str
    called: float  # monotonic
    report: SwapReport
    returned: float
    first_new: float | None
    cutover: float  # monotonic (the report stamps it with time.time())
    memory: dict[str, float | None] = field(default_factory=dict)


def run_scenario(name: str, a: Path, b: Path, args: argparse.Namespace, fps: int) -> dict[str, Any]:
    sources = [f"cam{i}=synthetic:?width=640&height=480&fps={fps}" for i in range(args.streams)]
    col = Collector()
    pkgs = [load_package(b), load_package(a)]
    versions = [p.manifest.version for p in pkgs]
    samples: list[SwapSample] = []
    started_load = load()
    with Pipeline(a, sources, max_batch=args.max_batch, on_result=col) as p:
        time.sleep(args.warm_s)
        steady_from = time.monotonic()
        time.sleep(args.steady_s)
        steady_to = time.monotonic()
        for n in range(1, args.memory_swaps + 1):
            spaced = n <= args.window_swaps
            pkg, ver = pkgs[(n - 1) % 2], versions[(n - 1) % 2]
            called = time.monotonic()
            report = p.swap_model(pkg, health_window_s=args.health_window_s)
            returned, wall = time.monotonic(), time.time()
            cut = returned - (wall - report.cutover_at) if report.cutover_at else returned
            first = col.first_of(ver, called, 30.0) if report.ok else None
            s = SwapSample(n, f"{pkg.ref}", called, report, returned, first, cut)
            samples.append(s)
            if not report.ok:
                raise SystemExit(f"{name}: swap {n} to {pkg.ref} refused at {report.stage}: {report.error}")
            # let the health window close (the previous version is released then), then measure
            gap = max(args.health_window_s + 0.3, (WINDOW_S * 2 + 1.0) if spaced else 0.0)
            time.sleep(max(0.0, gap - (time.monotonic() - returned)))
            s.memory = memory_mb()
        stats = p.stats()
        trimmed = _trimmed()
    rows = col.snapshot()
    out = assemble(name, fps, args, rows, samples, (steady_from, steady_to), stats, col.gaps(), started_load)
    out["memory"]["after_last_swap_then_malloc_trim"] = trimmed
    return out


def _trimmed() -> dict[str, float | None]:
    """Memory after glibc gives its free pages back: what RSS holds beyond live allocations."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return memory_mb()


def _same_target(samples: list[SwapSample]) -> dict[str, Any]:
    """Swaps alternate between two versions of different sizes: compare like with like."""
    same = [s for s in samples if s.to == samples[0].to]
    if len(same) < 2:
        return {}
    first, last = same[0], same[-1]
    tail = same[-20:]

    def growth(key: str) -> float:
        return round((last.memory[key] or 0.0) - (first.memory[key] or 0.0), 2)

    def slope(key: str) -> float | None:
        if len(tail) < 3:
            return None
        return round(float(np.polyfit([s.n for s in tail], [s.memory[key] or 0.0 for s in tail], 1)[0]), 4)

    return {
        "first": {"swap": first.n, **first.memory},
        "last": {"swap": last.n, **last.memory},
        "rss_growth_mb": growth("rss_mb"),
        "heap_growth_mb": growth("heap_in_use_mb"),
        "rss_slope_mb_per_swap_last_20_same_target": slope("rss_mb"),
        "heap_slope_mb_per_swap_last_20_same_target": slope("heap_in_use_mb"),
    }


def _window_breakdown(rows: list[tuple[float, str, float, str, int]], s: SwapSample) -> dict[str, Any]:
    cut = s.cutover
    pre = [lat for t, _v, lat, *_ in rows if cut - WINDOW_S <= t < cut]
    post = [lat for t, _v, lat, *_ in rows if cut <= t <= cut + WINDOW_S]
    during = [lat for t, _v, lat, *_ in rows if s.called <= t <= cut]
    worst = max(((lat, t) for t, _v, lat, *_ in rows if cut - WINDOW_S <= t <= cut + WINDOW_S), default=None)
    return {
        "swap": s.n,
        "to": s.to,
        "p99_ms": pct(pre + post, 99),
        "p99_before_cutover_ms": pct(pre, 99),
        "p99_after_cutover_ms": pct(post, 99),
        "p99_while_loading_ms": pct(during, 99),
        "worst_ms": round(worst[0], 2) if worst else None,
        "worst_at_s_from_cutover": round(worst[1] - cut, 3) if worst else None,
    }


def assemble(
    name: str,
    fps: int,
    args: argparse.Namespace,
    rows: list[tuple[float, str, float, str, int]],
    samples: list[SwapSample],
    steady: tuple[float, float],
    stats: Any,
    gaps: int,
    started_load: dict[str, Any],
) -> dict[str, Any]:
    steady_lat = [lat for t, _v, lat, *_ in rows if steady[0] <= t < steady[1]]
    spaced = samples[: args.window_swaps]
    window_lat = [lat for s in spaced for t, _v, lat, *_ in rows if abs(t - s.cutover) <= WINDOW_S]
    s_p99, w_p99 = pct(steady_lat, 99), pct(window_lat, 99)
    lat_ms = [(s.first_new - s.called) * 1000 for s in samples if s.first_new is not None]
    mem = [s.memory for s in samples]
    rss = [m["rss_mb"] or 0.0 for m in mem]
    heap = [m["heap_in_use_mb"] for m in mem]
    tail = list(range(max(0, len(rss) - 40), len(rss)))
    slope = float(np.polyfit(tail, [rss[i] for i in tail], 1)[0]) if len(tail) >= 3 else None
    heap_slope = (
        float(np.polyfit(tail, [heap[i] or 0.0 for i in tail], 1)[0])
        if len(tail) >= 3 and heap[0] is not None
        else None
    )
    elapsed = stats.elapsed_s or 1.0
    return {
        "scenario": name,
        "models": [samples[1].to if len(samples) > 1 else "", samples[0].to],
        "load_at_start": started_load,
        "load_at_end": load(),
        "streams": args.streams,
        "fps_per_stream": fps,
        "max_batch": args.max_batch,
        "health_window_s": args.health_window_s,
        "throughput": {
            "offered_fps": args.streams * fps,
            "results_fps": round(stats.results / elapsed, 1),
            "frames_in": stats.frames_in,
            "results": stats.results,
            "dropped": stats.dropped,
            "sequence_gaps": gaps,
            "mean_batch": round(stats.mean_batch, 2),
            "infer_p50_ms": round(stats.stages["infer"].p50_ms, 2),
        },
        "swap_latency_ms": {
            "definition": "swap_model() called -> first result tagged with the new version",
            **{k.replace("_ms", ""): v for k, v in summary(lat_ms).items() if k != "n"},
            "n": len(lat_ms),
            "load_ms_p50": pct([s.report.load_ms for s in samples], 50),
            "warmup_ms_p50": pct([s.report.warmup_ms for s in samples], 50),
            "call_to_cutover_ms_p50": pct([(s.cutover - s.called) * 1000 for s in samples], 50),
            "cutover_to_first_result_ms_p50": pct(
                [((s.first_new or s.cutover) - s.cutover) * 1000 for s in samples], 50
            ),
        },
        "frame_latency": {
            "definition": f"capture->result of results delivered within +-{WINDOW_S:.0f} s of a cut-over "
            f"(first {len(spaced)} swaps, spaced {WINDOW_S * 2 + 1:.0f} s apart) vs the "
            f"{args.steady_s:.0f} s before the first swap",
            "steady": summary(steady_lat),
            "swap_window": summary(window_lat),
            "p99_delta_ms": round(w_p99 - s_p99, 2) if s_p99 is not None and w_p99 is not None else None,
            "goal_delta_ms": GOAL_MS,
            "per_swap": [_window_breakdown(rows, s) for s in spaced],
        },
        "memory": {
            "after_swap_1": mem[0] if mem else None,
            f"after_swap_{len(mem)}": mem[-1] if mem else None,
            "rss_growth_mb": round(rss[-1] - rss[0], 2) if rss else None,
            "rss_min_max_mb": [min(rss), max(rss)] if rss else None,
            "rss_slope_mb_per_swap_last_40": round(slope, 4) if slope is not None else None,
            "heap_growth_mb": (round((heap[-1] or 0) - (heap[0] or 0), 2) if heap and heap[0] is not None else None),
            "heap_slope_mb_per_swap_last_40": round(heap_slope, 4) if heap_slope is not None else None,
            "same_target_as_swap_1": _same_target(samples),
            "rss_series_mb": rss,
            "heap_series_mb": heap,
            "ort_arena": "ONNX Runtime's Python API exposes no arena statistics for the CPU provider; "
            "its arena is malloc'd, so heap_in_use_mb (glibc mallinfo2: uordblks + hblkhd) "
            "includes it",
        },
    }


# --- the agent path ---------------------------------------------------------------------------------
class LineLog:
    """Reads a child's stderr line by line and stamps each line with the wall time it arrived."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._t = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._t.start()

    def _pump(self, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            with self._lock:
                self.lines.append((time.time(), raw.decode(errors="replace").rstrip()))

    def find(self, needle: str) -> list[tuple[float, str]]:
        with self._lock:
            return [(t, line) for t, line in self.lines if needle in line]


class JsonlTail:
    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.rows = path, 0, []  # type: ignore[var-annotated]

    def poll(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return self.rows
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError):
                self.rows.append(json.loads(line))
        return self.rows


_STEPS = ("RECEIVED", "DOWNLOADING", "VERIFYING", "INSTALLING", "LOADING", "WARMUP", "GATE", "CUTOVER", "DONE")


def agent_path(scenario: str, a: Path, b: Path, args: argparse.Namespace, work: Path, fps: int) -> dict[str, Any]:
    from edgefleet.cloud import FleetClient

    keys = work / "keys"
    keys.mkdir()
    generate_signing_key(keys / "pub.pem", keys / "pub.pub.pem")
    chain = [a, b]
    for i in range(2, args.agent_deploys + 1):  # more versions: copies of a and b under new numbers
        chain.append(renamed_version(chain[i % 2], work / f"{scenario}-v{i + 1}", f"{i + 1}.0.0"))
    ctl = ControllerProcess(
        work,
        f"sqlite:///{work}/controller.db",
        trusted_keys=(keys / "pub.pub.pem",),
        extra=("--status-interval", "1", "--tick", "0.2"),
    ).start()
    agent: subprocess.Popen[bytes] | None = None
    out: dict[str, Any] = {"scenario": scenario, "load_at_start": load(), "deploys": []}
    try:
        with FleetClient(ctl.address, timeout_s=60) as fleet:
            refs = [f"{(r := fleet.push(p, key=keys / 'pub.pem').model).name}:{r.version}" for p in chain]
            jsonl = work / "agent-results.jsonl"
            sources = [f"cam{i}=synthetic:?width=640&height=480&fps={fps}" for i in range(args.streams)]
            cfg = {
                "device_id": "bench-1",
                "labels": {"bench": "swap"},
                "controller": {"address": ctl.address, "backoff_initial_s": 0.2, "backoff_max_s": 1.0},
                "trusted_keys": [str(keys / "pub.pub.pem")],
                "state_dir": str(work / "agent-state"),
                "pipelines": {
                    "cam": {
                        "model": str(a),
                        "max_batch": args.max_batch,
                        "sources": sources,
                        "sinks": [{"type": "jsonl", "path": str(jsonl)}],
                    }
                },
            }
            (work / "agent.yaml").write_text(yaml.safe_dump(cfg))
            agent = subprocess.Popen(
                [EDGEFLEET, "agent", "--config", str(work / "agent.yaml")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            log = LineLog(agent.stderr)
            wait_for("the agent online", lambda: fleet.get_device("bench-1").online, 60)
            tail = JsonlTail(jsonl)
            time.sleep(args.warm_s)
            tail.poll()
            tail.rows.clear()  # the steady state starts after the warm-up
            time.sleep(args.steady_s)
            for ref in refs[1:]:
                out["deploys"].append(_one_deploy(fleet, ref, tail, log))
                time.sleep(WINDOW_S + 1.0)
            out["frame_latency"] = _agent_windows(tail.poll(), out["deploys"])
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            try:
                agent.wait(20)
            except subprocess.TimeoutExpired:
                agent.kill()
        ctl.stop()
    lat = [d["deploy_to_first_result_ms"] for d in out["deploys"] if d.get("deploy_to_first_result_ms")]
    out["swap_latency_ms"] = {
        "definition": "deploy (CreateRollout sent) -> first result from the new version in the agent's "
        "JSONL sink (capture time + latency)",
        **summary(lat),
    }
    out["load_at_end"] = load()
    return out


def _one_deploy(fleet: Any, ref: str, tail: JsonlTail, log: LineLog) -> dict[str, Any]:
    version = ref.split(":")[1]
    t0 = time.time()
    ro = fleet.deploy(ref, {"bench": "swap"}, ["100%"], health_window_s=1.0)
    t_rpc = time.time()

    def first() -> dict[str, Any] | None:
        return next((r for r in tail.poll() if r.get("version") == version and r["ts"] >= t0 - 5), None)

    row = wait_for(f"a result from {ref}", first, 120, 0.05)
    t_first = row["ts"] + row["latency_ms"] / 1000.0
    wait_for(
        f"rollout {ro.rollout_id} completed",
        lambda: fleet.rollout(ro.rollout_id).state in ("completed", "aborted"),
        120,
        0.2,
    )
    steps: dict[str, float] = {}
    for step in _STEPS:
        hits = log.find(f"command {ro.rollout_id}.bench-1.apply: STEP_{step}")
        if hits:
            steps[step.lower()] = round((hits[0][0] - t0) * 1000, 1)
    return {
        "to": ref,
        "rollout": ro.rollout_id,
        "create_rollout_rpc_ms": round((t_rpc - t0) * 1000, 1),
        "deploy_to_first_result_ms": round((t_first - t0) * 1000, 1),
        "agent_steps_ms_after_deploy": steps,
        "cutover_wall": steps.get("cutover"),
        "t0": t0,
    }


def _agent_windows(rows: list[dict[str, Any]], deploys: list[dict[str, Any]]) -> dict[str, Any]:
    """Centre each window on the agent's cut-over (its CUTOVER log line); else on the first new result."""
    done = [(r["ts"] + r["latency_ms"] / 1000, r["latency_ms"]) for r in rows]
    cuts = []
    for d in deploys:
        if d.get("cutover_wall") is not None:
            cuts.append(d["t0"] + d["cutover_wall"] / 1000.0)
            continue
        ver = d["to"].split(":")[1]
        firsts = [r["ts"] + r["latency_ms"] / 1000 for r in rows if r["version"] == ver and r["ts"] >= d["t0"] - 5]
        if firsts:
            cuts.append(min(firsts))
    first_deploy = deploys[0]["t0"] if deploys else float("inf")
    steady = [lat for t, lat in done if t < first_deploy]
    window = [lat for t, lat in done if any(abs(t - c) <= WINDOW_S for c in cuts)]
    s99, w99 = pct(steady, 99), pct(window, 99)
    for d in deploys:
        d.pop("t0", None)
        d.pop("cutover_wall", None)
    return {
        "steady": summary(steady),
        "swap_window": summary(window),
        "p99_delta_ms": round(w99 - s99, 2) if s99 is not None and w99 is not None else None,
        "note": f"results delivered within +-{WINDOW_S:.0f} s of the agent's cut-over (its STEP_CUTOVER "
        "log line) vs the results before the first deploy",
    }


# --- main -------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default="toy,nanodet", help="comma-separated: toy, nanodet")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--fps", type=int, default=30, help="per stream, for the toy scenario")
    ap.add_argument(
        "--nanodet-fps",
        type=int,
        default=30,
        help="per stream for nanodet (this CPU runs ~10 frames/s of it: 30 saturates it)",
    )
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--warm-s", type=float, default=3.0)
    ap.add_argument("--steady-s", type=float, default=10.0)
    ap.add_argument("--window-swaps", type=int, default=6, help="swaps spaced apart for the latency windows")
    ap.add_argument("--memory-swaps", type=int, default=50, help="total swaps (memory after 1 vs after N)")
    ap.add_argument("--health-window-s", type=float, default=0.5)
    ap.add_argument("--agent", default="toy", help="comma-separated scenarios for the agent path, or none")
    ap.add_argument("--agent-deploys", type=int, default=4, help="deploys per agent-path scenario")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()
    if not (1 <= args.window_swaps <= args.memory_swaps <= 500):
        ap.error("need 1 <= --window-swaps <= --memory-swaps <= 500")
    result: dict[str, Any] = {
        "bench": "swap",
        "machine": machine(),
        "command": " ".join(sys.argv),
        "scenarios": [],
        "agent_path": [],
    }
    with tempfile.TemporaryDirectory(prefix="edgefleet-swap-bench-") as tmp:
        work = Path(tmp)
        for name in [s for s in args.scenarios.split(",") if s]:
            a, b = build_packages(name, work)
            fps = args.nanodet_fps if name == "nanodet" else args.fps
            result["scenarios"].append(run_scenario(name, a, b, args, fps))
            _emit(result, args.out)
        for name in [s for s in args.agent.split(",") if s and s != "none"]:
            sub = work / f"agent-{name}"
            sub.mkdir()
            a, b = build_packages(name, sub)
            fps = args.nanodet_fps if name == "nanodet" else args.fps
            result["agent_path"].append(agent_path(name, a, b, args, sub, fps))
            _emit(result, args.out)
    print(json.dumps(result, indent=2))
    return 0


def _emit(result: dict[str, Any], out: Path | None) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
