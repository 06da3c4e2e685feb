#!/usr/bin/env python3
"""Does installing a model starve the pipelines that keep running? Prints one JSON object.

    .venv/bin/python tools/bench/install_load_bench.py --out bench/results/install-load.json
    .venv/bin/python tools/bench/install_load_bench.py --trials 1 --padding-mb 4        # quicker
    .venv/bin/python tools/bench/install_load_bench.py --variant defaults \
        --variant unbounded:install_nice=0,download_rate_limit_kbps=0             # agent settings side by side

A real controller and a real agent process on loopback. The agent runs the demo's load, untouched by the
update: pipeline ``entrance`` on NanoDet-m (models/nanodet-m) over two streams of the committed clip in
real time (``?realtime=1&loop=1&live=1``: paced like cameras, so a frame the pipeline cannot take in
time is dropped and counted, where a plain file source would wait), with the demo's JSONL and
annotated-video sinks. A second pipeline, ``side``, serves toy-yolo on a small synthetic camera; each
trial rolls a new toy-yolo version out to it, padded with ``--padding-mb`` of random bytes so that the
download, the verification (sha256 of the artifact and of every file, the signature) and the install
(unpack, rename) weigh what a real model's do.

``--busy-cores N`` (or ``busy_cores=N`` in a variant, for that variant only) adds processes that keep N
cores busy at the pipelines' priority: a host loaded by other work, the same in every window (other jobs
on a shared machine are not).

Each trial is a control window (``--control-s`` seconds, nothing happening) and then a deploy, both
measured on the same running agent, so both see the same machine. Each ``--variant`` (agent.yaml
settings) gets an agent of its own, one after the other, all in one run. A dropped frame is a gap in a
stream's sequence numbers in the JSONL sink; it is counted in the window holding the capture time of
the next delivered frame. Windows of the deploy, from the agent's own log lines (stamped as they
arrive): ``download+install`` = STEP_DOWNLOADING → STEP_INSTALLING (the artifact verified and in the
store), ``swap`` = STEP_INSTALLING → STEP_DONE (load beside, warm-up, gate, cut-over of ``side``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import EDGEFLEET, ControllerProcess, emit, load, machine, wait_for  # noqa: E402

CLIP = ROOT / "models" / "media" / "vtest-300.mp4"
NANODET = ROOT / "models" / "nanodet-m"
DEVICE = "bench-install"


class LineLog:
    """A child's stderr, each line stamped with the wall time it arrived."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            with self._lock:
                self.lines.append((time.time(), raw.decode(errors="replace").rstrip()))

    def first(self, needle: str) -> float | None:
        with self._lock:
            return next((t for t, line in self.lines if needle in line), None)

    def line(self, needle: str) -> str:
        with self._lock:
            return next((line for _, line in self.lines if needle in line), "")


class ThreadCpu:
    """Samples the agent's threads' CPU time (/proc/PID/task/*/stat) every 0.1 s, by thread name, so a
    window's CPU can be split between the install thread, the pipelines and the rest."""

    def __init__(self, pid: int, log: LineLog) -> None:
        self.pid, self.log = pid, log
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")
        threading.Thread(target=self._run, daemon=True).start()

    def _read(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (task / "stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                if task.name == self.install_tid():
                    group = "install thread"
                elif task.name == str(self.pid):
                    group = "main thread (event loop: gRPC, the download)"
                else:
                    group = "pipelines, ONNX Runtime, sinks, gRPC core"
                out[group] += (int(fields[11]) + int(fields[12])) / self._tick
        return dict(out)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with contextlib.suppress(OSError):
                self.samples.append((time.time(), self._read()))

    def install_tid(self) -> str:
        """The install thread's id, from the agent's log line "install thread N runs at nice M"."""
        hit = self.log.line("install thread ")
        return hit.split("install thread ", 1)[1].split()[0] if hit else ""

    def stop(self) -> None:
        self._stop.set()

    def between(self, a: float, b: float) -> dict[str, float]:
        """CPU seconds per thread group from the sample nearest ``a`` to the one nearest ``b``."""
        if not self.samples:
            return {}
        first = min(self.samples, key=lambda x: abs(x[0] - a))[1]
        last = min(self.samples, key=lambda x: abs(x[0] - b))[1]
        return {k: round(v - first.get(k, 0.0), 2) for k, v in sorted(last.items())}


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


def drops_by_window(rows: list[dict[str, Any]], windows: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Dropped frames (gaps in each stream's sequence numbers), delivered frames and the worst capture ->
    result latency per window."""
    per_stream: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        per_stream[r["stream"]].append(r)
    out: dict[str, dict[str, Any]] = {name: {"dropped": 0, "delivered": 0, "max_latency_ms": 0.0} for name in windows}
    for results in per_stream.values():
        results.sort(key=lambda r: r["seq"])
        for prev, cur in itertools.pairwise(results):
            for name, (a, b) in windows.items():
                if a <= cur["ts"] < b:
                    w = out[name]
                    w["dropped"] += cur["seq"] - prev["seq"] - 1
                    w["delivered"] += 1
                    w["max_latency_ms"] = max(w["max_latency_ms"], round(cur["latency_ms"], 1))
    return out


def build_packages(work: Path, trials: int, padding: int, key: Path) -> list[Path]:
    from tests.support.onnx_models import yolo_package

    pkgs = [yolo_package(work / "pkgs" / "1.0.0", version="1.0.0")]
    for i in range(trials):
        d = work / "pkgs" / f"{i + 2}.0.0"
        d.mkdir(parents=True)
        (d / "padding.bin").write_bytes(os.urandom(padding))
        pkgs.append(yolo_package(d, version=f"{i + 2}.0.0"))
    return pkgs


def agent_config(work: Path, address: str, base: Path, pub: Path, overrides: dict[str, Any]) -> Path:
    cfg: dict[str, Any] = {
        "device_id": DEVICE,
        "labels": {"bench": "install"},
        "controller": {"address": address, "backoff_initial_s": 0.2, "backoff_max_s": 1.0},
        "trusted_keys": [str(pub)],
        "state_dir": str(work / "agent-state"),
        "pipelines": {
            "entrance": {  # the demo's pipeline (tools/demo/run_demo.py), its clip paced like two cameras
                "model": str(NANODET),
                "sources": [f"lobby={CLIP}?realtime=1&loop=1&live=1", f"yard={CLIP}?realtime=1&loop=1&live=1"],
                "max_batch": 2,
                "sinks": [
                    {"type": "jsonl", "path": str(work / "entrance.jsonl")},
                    {"type": "video", "path": str(work / "annotated.mp4")},
                ],
            },
            "side": {
                "model": str(base),
                "sources": ["side=synthetic:?width=160&height=120&fps=10"],
                "sinks": [{"type": "jsonl", "path": str(work / "side.jsonl")}],
            },
        },
    }
    cfg.update(overrides)
    path = work / "agent.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def one_trial(fleet: Any, log: LineLog, ref: str, control_s: float) -> dict[str, Any]:
    c0 = time.time()
    time.sleep(control_s)
    c1 = time.time()
    ro = fleet.deploy(ref, {"bench": "install"}, ["100%"], health_window_s=1.0)
    cid = f"{ro.rollout_id}.{DEVICE}.apply"
    wait_for(f"{ref} done", lambda: log.first(f"command {cid}: STEP_DONE"), 300, 0.1)
    steps = {s: log.first(f"command {cid}: STEP_{s}") for s in ("DOWNLOADING", "INSTALLING", "CUTOVER", "DONE")}
    if any(v is None for v in steps.values()):
        raise RuntimeError(f"{cid}: the agent's log lacks a step: {steps}")
    wait_for("the rollout over", lambda: fleet.rollout(ro.rollout_id).state in ("completed", "aborted"), 120, 0.2)
    t = {k: float(v or 0.0) for k, v in steps.items()}
    return {
        "to": ref,
        "rollout": ro.rollout_id,
        "state": fleet.rollout(ro.rollout_id).state,
        "windows": {
            "control": (c0, c1),
            "download+install": (t["DOWNLOADING"], t["INSTALLING"]),
            "swap": (t["INSTALLING"], t["DONE"]),
        },
    }


_SPIN = """
import sys, time
duty = float(sys.argv[1])
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.01 * duty:
        pass
    time.sleep(0.01 * (1.0 - duty))
"""


def busy(cores: float) -> list[subprocess.Popen[bytes]]:
    """Processes that keep ``cores`` of CPU busy (each a full core, the last one part of it)."""
    out = []
    while cores > 1e-6:
        duty = min(1.0, cores)
        out.append(subprocess.Popen([sys.executable, "-c", _SPIN, str(duty)], start_new_session=True))
        cores -= duty
    return out


def run_variant(args: argparse.Namespace, work: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """One agent on ``overrides``: its trials, and the drops per pipeline and window."""
    from edgefleet.cloud import FleetClient
    from edgefleet.sdk import generate_signing_key

    generate_signing_key(work / "pub.pem", work / "pub.pub.pem")
    pkgs = build_packages(work, args.trials, int(args.padding_mb * 1e6), work / "pub.pem")
    ctl = ControllerProcess(work, f"sqlite:///{work}/c.db", trusted_keys=(work / "pub.pub.pem",),
                            extra=("--status-interval", "1", "--tick", "0.2")).start()  # fmt: skip
    agent: subprocess.Popen[bytes] | None = None
    trials: list[dict[str, Any]] = []
    try:
        with FleetClient(ctl.address, timeout_s=120) as fleet:
            refs = [f"{(m := fleet.push(p, key=work / 'pub.pem').model).name}:{m.version}" for p in pkgs]
            cfg = agent_config(work, ctl.address, pkgs[0], work / "pub.pub.pem", overrides)
            agent = subprocess.Popen([EDGEFLEET, "agent", "--config", str(cfg)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
            log = LineLog(agent.stderr)
            cpu = ThreadCpu(agent.pid, log)
            wait_for("the agent online", lambda: fleet.get_device(DEVICE).online, 120)
            time.sleep(args.warm_s)
            for ref in refs[1:]:
                trials.append(one_trial(fleet, log, ref, args.control_s))
                time.sleep(2.0)
        cpu.stop()
        for t in trials:
            t["agent_cpu_s"] = {k: cpu.between(a, b) for k, (a, b) in t["windows"].items()}
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            try:
                agent.wait(30)
            except subprocess.TimeoutExpired:
                agent.kill()
        ctl.stop()
    rows = {name: read_rows(work / f"{name}.jsonl") for name in ("entrance", "side")}
    totals: dict[str, dict[str, dict[str, Any]]] = {}
    for t in trials:
        t["pipelines"] = {name: drops_by_window(r, t["windows"]) for name, r in rows.items()}
        t["seconds"] = {k: round(b - a, 2) for k, (a, b) in t["windows"].items()}
        for pipe, per in t["pipelines"].items():
            for window, figures in per.items():
                acc = totals.setdefault(pipe, {}).setdefault(
                    window, {"dropped": 0, "delivered": 0, "seconds": 0.0, "max_latency_ms": 0.0}
                )
                acc["dropped"] += figures["dropped"]
                acc["delivered"] += figures["delivered"]
                acc["seconds"] = round(acc["seconds"] + t["seconds"][window], 2)
                acc["max_latency_ms"] = max(acc["max_latency_ms"], figures["max_latency_ms"])
        del t["windows"]
    return {
        "agent_overrides": overrides,
        "trials": trials,
        "totals": totals,
        "entrance_drops": {w: v["dropped"] for w, v in totals.get("entrance", {}).items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--padding-mb", type=float, default=8.0, help="random bytes in each new version (MB)")
    ap.add_argument("--control-s", type=float, default=10.0, help="each control window (s)")
    ap.add_argument("--warm-s", type=float, default=15.0, help="run before the first window (s)")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME[:KEY=VALUE,...]",
        help="agent.yaml settings (YAML values) of one agent run; repeat for several (default: 'defaults')",
    )
    ap.add_argument("--busy-cores", type=float, default=0.0, help="background CPU load, in cores (0.5: half a core)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    variants: dict[str, dict[str, Any]] = {}
    for spec in args.variant or ["defaults"]:
        name, _, settings = spec.partition(":")
        pairs = (kv.partition("=") for kv in settings.split(",") if kv)
        variants[name] = {k: yaml.safe_load(v) for k, _, v in pairs}
    result: dict[str, Any] = {
        "benchmark": "install-load",
        "command": "tools/bench/install_load_bench.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "load_at_start": load(),
        "padding_mb": args.padding_mb,
        "variants": {},
    }
    for name, overrides in variants.items():
        cores = float(overrides.pop("busy_cores", args.busy_cores))
        spinners = busy(cores)
        try:
            with tempfile.TemporaryDirectory(prefix="edgefleet-install-load-") as tmp:
                result["variants"][name] = run_variant(args, Path(tmp), overrides)
        finally:
            for sp in spinners:
                sp.kill()
                sp.wait(10)
        result["variants"][name].update(busy_cores=cores, load_after=load())
    result["entrance_drops"] = {name: v["entrance_drops"] for name, v in result["variants"].items()}
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
