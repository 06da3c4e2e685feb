#!/usr/bin/env python3
"""`make demo`: the whole loop on one machine, on embedded defaults.

1. a publisher key; 2. a controller (SQLite) on a free loopback port; 3. nanodet-m 1.0.0 (416x416, 80
COCO classes) and 2.0.0 (320x320, traffic classes only, derived by tools/models/build_nanodet_320.py)
signed and pushed; 4. an agent running two real-time streams of the demo clip on 1.0.0;
5. `edgefleet deploy nanodet-m:2.0.0`: the agent downloads, verifies and hot-swaps it into the running
pipeline; 6. a live table shows the version switch and the people crossing a line (tracked with
ByteTrack, ``analytics: [track, zones]``); 7. a summary proves no frame was dropped: every frame of every
stream has exactly one result, gap-free, each tagged with the version that made it; and that the people
tracked when the version changed kept their track ids.

Outputs land in demo-out/: detections.jsonl (every result), annotated-*.mp4 (H.264, the track ids and
trails, the line and its counters, and the serving version drawn on each frame), controller and agent
logs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

REPO = Path(__file__).resolve().parents[2]
# NanoDet-m scores the clip's pedestrians low: detections from 0.2, tracks from 0.5 (tests/support/track_swap.py)
ANALYTICS = [
    {"type": "track", "high_threshold": 0.4, "new_track_threshold": 0.5, "low_threshold": 0.2},
    {
        "type": "zones",
        "lines": [{"name": "gate", "points": [[384, 150], [384, 400]], "classes": ["person"]}],
        "zones": [{"name": "road", "points": [[0, 190], [768, 190], [768, 330], [0, 300]], "classes": ["person"]}],
    },
]
BIN = Path(sys.executable).parent
EDGEFLEET = str(BIN / "edgefleet")
console = Console()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str) -> str:
    out = subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"demo: `edgefleet {' '.join(args)}` failed: {out.stderr.strip()}")
    return out.stdout


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    f = log.open("wb")
    return subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def stop(p: subprocess.Popen[bytes] | None) -> None:
    if p is not None and p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def start_broker(out: Path, url: str | None) -> tuple[str | None, subprocess.Popen[bytes] | None]:
    """The MQTT 5 broker for telemetry: ``--mqtt`` / $EDGEFLEET_DEMO_MQTT when given, else a private
    Mosquitto on a free loopback port when the system has one, else edgefleet's embedded MQTT 5 broker
    (``edgefleet_devbroker``: for demos and tests, not for a fleet)."""
    if url and url != "embedded":
        return url, None
    exe = (
        None
        if url == "embedded"
        else shutil.which("mosquitto")
        or next((p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if Path(p).exists()), None)
    )
    port = free_port()
    if exe is not None:
        conf = out / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 100000\n")
        cmd, log, name = [exe, "-c", str(conf)], out / "mosquitto.log", "mosquitto"
    else:
        module = "edgefleet_devbroker"
        cmd, log, name = [sys.executable, "-m", module, "--port", str(port)], out / "broker.log", "embedded broker"
    proc = spawn(cmd, log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            if exe is None:
                console.print("[dim]telemetry broker: edgefleet's embedded MQTT 5 broker (no mosquitto here)[/]")
            return f"mqtt://127.0.0.1:{port}", proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    stop(proc)
    console.print(f"[yellow]note:[/] the {name} did not start (see {log}): demo runs without telemetry")
    return None, None


def read_results(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # the last line may still be being written
    return rows


def table(elapsed: float, device: Any, rows: list[dict[str, Any]], phase: str) -> Table:
    t = Table(title=f"edgefleet demo · {elapsed:4.0f}s · {phase}")
    cols = (
        "stream",
        "results",
        "by version",
        "last version",
        "tracks",
        "gate in/out",
        "fps",
        "p95 ms",
        "dropped",
        "from",
    )
    for col in cols:
        t.add_column(col, justify="right" if col in {"results", "tracks", "fps", "p95 ms", "dropped"} else "left")
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        per[r["stream"]].append(r)
    health = device.pipelines[0].health if device is not None and device.pipelines else None
    fps = p95 = None
    source = "status" if health else ""
    if health is not None:
        fps, p95 = health.fps, health.latency_p95_ms
    if device is not None and device.HasField("telemetry"):  # MQTT telemetry, when the demo has a broker
        fps, p95, source = device.telemetry.fps, device.telemetry.latency_p95_ms, "telemetry"
    for sid in sorted(per):
        rs = per[sid]
        versions = Counter(r["version"] for r in rs)
        t.add_row(
            sid,
            str(len(rs)),
            ", ".join(f"{v}: {n}" for v, n in sorted(versions.items())),
            rs[-1]["version"],
            str(len(_track_ids(rs))),
            _gate(rs[-1]),
            f"{fps / max(1, len(per)):.1f}" if fps is not None else "",
            f"{p95:.1f}" if p95 is not None else "",
            str(health.dropped) if health else "",
            source,
        )
    return t


def _track_ids(rows: list[dict[str, Any]]) -> set[int]:
    return {d["track_id"] for r in rows for d in r.get("detections", ()) if "track_id" in d}


def _gate(row: dict[str, Any]) -> str:
    gate = next((g for g in row.get("regions", ()) if g["name"] == "gate"), None)
    return f"{sum(gate['in'].values())} / {sum(gate['out'].values())}" if gate else ""


def _kept_at_swap(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """Person tracks on the last frame of 1.0.0, and how many of them 2.0.0 shows with the same id within
    10 frames."""
    cut = next((i for i, r in enumerate(rows) if r["version"] != rows[0]["version"]), None)
    if cut is None:
        return 0, 0
    before = {d["track_id"] for d in rows[cut - 1].get("detections", ()) if "track_id" in d and d["label"] == "person"}
    after = {d.get("track_id") for r in rows[cut : cut + 10] for d in r.get("detections", ())}
    return len(before), len(before & after)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "demo-out")
    ap.add_argument("--before", type=float, default=12.0, help="seconds on 1.0.0 before the deploy")
    ap.add_argument("--after", type=float, default=15.0, help="seconds after the swap before stopping")
    ap.add_argument(
        "--mqtt",
        default=os.environ.get("EDGEFLEET_DEMO_MQTT"),
        help="MQTT 5 broker URL for telemetry, or 'embedded' (default: a private mosquitto when installed, "
        "else the embedded one)",
    )
    args = ap.parse_args()
    out: Path = args.out.resolve()  # agent.yaml paths resolve against its own folder
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    from edgefleet.cloud import FleetClient
    from edgefleet.sdk import generate_signing_key

    console.print("[bold]edgefleet demo[/]: controller + agent + signed models + hot swap, all on loopback")
    key_id = generate_signing_key(out / "publisher.pem", out / "publisher.pub.pem")
    console.print(f"publisher key {key_id}")
    build_v2 = REPO / "tools/models/build_nanodet_320.py"
    subprocess.run([sys.executable, str(build_v2), str(out / "nanodet-m-2.0.0")], check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    address = f"127.0.0.1:{port}"
    controller = agent = broker = None
    try:
        mqtt_url, broker = start_broker(out, args.mqtt)
        ingest = ["--mqtt", mqtt_url, "--fleet", "demo"] if mqtt_url else []
        controller = spawn(
            [
                EDGEFLEET,
                "controller",
                "serve",
                "--db",
                f"sqlite:///{out}/controller.db",
                "--data-dir",
                str(out / "controller-data"),
                "--listen",
                address,
                "--insecure",
                "--trusted-key",
                str(out / "publisher.pub.pem"),
                "--health-window",
                "5",
                "--status-interval",
                "1",
                *ingest,
            ],
            out / "controller.log",
        )
        client = FleetClient(address)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.list_models()
                break
            except Exception:
                if time.monotonic() > deadline or controller.poll() is not None:
                    log = out / "controller.log"
                    raise SystemExit(f"demo: the controller did not start; see {log}") from None
                time.sleep(0.3)
        console.print(
            f"controller on {address} (SQLite {out / 'controller.db'})"
            + (f", telemetry from {mqtt_url}" if mqtt_url else "")
        )
        for pkg in (REPO / "models/nanodet-m", out / "nanodet-m-2.0.0"):
            console.print(
                cli("models", "push", str(pkg), "--key", str(out / "publisher.pem"), "--controller", address).strip()
            )
        clip = REPO / "models/media/vtest-300.mp4"
        agent_cfg = {
            "device_id": "demo-cam-01",
            "labels": {"site": "demo"},
            "controller": {"address": address},
            "trusted_keys": [str(out / "publisher.pub.pem")],
            "state_dir": str(out / "agent-state"),
            "pipelines": {
                "entrance": {
                    "model": str(REPO / "models/nanodet-m"),
                    "sources": [f"lobby={clip}?realtime=1&loop=1", f"yard={clip}?realtime=1&loop=1"],
                    "max_batch": 2,
                    "score_threshold": 0.2,
                    "analytics": ANALYTICS,
                    "sinks": [
                        {"type": "jsonl", "path": str(out / "detections.jsonl")},
                        {"type": "video", "path": str(out / "annotated.mp4")},
                    ],
                }
            },
        }
        if mqtt_url:
            agent_cfg["telemetry"] = {
                "broker": mqtt_url,
                "fleet": "demo",
                "interval_s": 1.0,
                "events": {"max_per_s": 2.0},
            }
        (out / "agent.yaml").write_text(json.dumps(agent_cfg, indent=2))
        agent = spawn([EDGEFLEET, "agent", "--config", str(out / "agent.yaml")], out / "agent.log")
        started = time.monotonic()
        results_path = out / "detections.jsonl"
        deployed = swapped_at = None
        with Live(console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(0.5)
                if agent.poll() is not None:
                    raise SystemExit(f"demo: the agent stopped; see {out / 'agent.log'}")
                elapsed = time.monotonic() - started
                try:
                    device = client.get_device("demo-cam-01")
                except Exception:
                    device = None
                rows = read_results(results_path)
                phase = "serving 1.0.0"
                if deployed is None and elapsed >= args.before and rows:
                    deployed = elapsed
                    cli(
                        "deploy",
                        "nanodet-m:2.0.0",
                        "--to",
                        "site=demo",
                        "--waves",
                        "100%",
                        "--controller",
                        address,
                    )
                if deployed is not None:
                    phase = "deployed 2.0.0: download → verify → load → warm up → gate → cut over"
                    if rows and rows[-1]["version"] == "2.0.0" and swapped_at is None:
                        swapped_at = elapsed
                    if swapped_at is not None:
                        phase = f"2.0.0 serving since {swapped_at:.0f}s"
                        if elapsed - swapped_at >= args.after:
                            live.update(table(elapsed, device, rows, phase))
                            break
                    if elapsed - deployed > 120:
                        raise SystemExit(f"demo: the swap did not happen in 120 s; see {out / 'agent.log'}")
                live.update(table(elapsed, device, rows, phase))
        console.print()
        rollout = client.rollout()
        stop(agent)
        agent = None
    finally:
        stop(agent)
        stop(controller)
        stop(broker)
    return summary(out, results_path, rollout)


def summary(out: Path, results_path: Path, rollout: Any) -> int:
    rows = read_results(results_path)
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        per[r["stream"]].append(r)
    t = Table(title="summary: every frame in has exactly one result out")
    for col in ("stream", "frames", "gap-free", "1.0.0", "2.0.0", "switches", "labels after the swap"):
        t.add_column(col)
    tracking = Table(title="tracking across the swap")
    for col in ("stream", "tracks", "ids kept at the swap", "gate in / out"):
        tracking.add_column(col)
    ok = True
    for sid, rs in sorted(per.items()):
        seqs = [r["seq"] for r in rs]
        gap_free = seqs == list(range(len(seqs)))
        versions = [r["version"] for r in rs]
        switches = sum(a != b for a, b in itertools.pairwise(versions))
        labels = sorted({d["label"] for r in rs if r["version"] == "2.0.0" for d in r.get("detections", [])})
        before, kept = _kept_at_swap(rs)
        ok &= gap_free and switches == 1
        t.add_row(
            sid,
            str(len(rs)),
            "yes" if gap_free else "[red]NO[/]",
            str(versions.count("1.0.0")),
            str(versions.count("2.0.0")),
            str(switches),
            ", ".join(labels),
        )
        tracking.add_row(sid, str(len(_track_ids(rs))), f"{kept} of {before}", _gate(rs[-1]))
    console.print(t)
    console.print(tracking)
    console.print(
        "[dim]ids kept: the people tracked on the last frame of 1.0.0 that 2.0.0 shows with the same track id "
        "within 10 frames; gate: crossings of the line drawn in the video, in / out[/]"
    )
    console.print(f"rollout {rollout.rollout_id}: {rollout.state} ({rollout.model_ref})")
    console.print(f"results: {results_path}")
    for p in sorted(out.glob("annotated*.mp4")):
        console.print(f"annotated video: {p}")
    if not ok or rollout.state != "completed":
        console.print("[red]demo: the swap did not go as expected[/]")
        return 1
    console.print("[green]hot swap with no dropped frame: 1.0.0 (416px, 80 classes) → 2.0.0 (320px, 6 classes)[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
