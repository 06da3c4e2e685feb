"""Rich tables and JSON for the fleet CLI."""

from __future__ import annotations

import json
import time
from typing import Any

from google.protobuf.json_format import MessageToDict
from rich.console import Console
from rich.table import Table

__all__ = [
    "ago",
    "device_detail",
    "device_figures",
    "devices_table",
    "emit_json",
    "models_table",
    "rollout_tables",
]

_STATE_STYLE = {
    "succeeded": "green",
    "completed": "green",
    "running": "cyan",
    "applying": "cyan",
    "health": "cyan",
    "paused": "yellow",
    "pending": "dim",
    "skipped": "dim",
    "failed": "red",
    "aborted": "red",
    "rolling_back": "yellow",
    "rolled_back": "yellow",
    "unknown": "yellow",
}


def emit_json(obj: Any) -> None:
    if isinstance(obj, list):
        data: Any = [MessageToDict(m, preserving_proto_field_name=True) for m in obj]
    else:
        data = MessageToDict(obj, preserving_proto_field_name=True)
    print(json.dumps(data, indent=2, sort_keys=True))


def ago(ts: float) -> str:
    if not ts:
        return "never"
    d = max(0.0, time.time() - ts)
    if d < 90:
        return f"{d:.0f}s ago"
    if d < 5400:
        return f"{d / 60:.0f}m ago"
    return f"{d / 3600:.1f}h ago"


def _styled(state: str) -> str:
    style = _STATE_STYLE.get(state)
    return f"[{style}]{state}[/]" if style else state


def models_table(models: list[Any]) -> Table:
    t = Table(title="models")
    for col in ("model", "version", "task", "size", "sha256", "signed by", "pushed", "variants"):
        t.add_column(col, justify="right" if col == "size" else "left", overflow="fold")
    for m in models:
        variants = [v.variant for v in m.variants]
        if not m.portable and m.variants:
            shown = ", ".join(variants) + " (no portable artifact)"
        else:
            shown = ", ".join(["portable", *variants]) if variants else "-"
        t.add_row(
            m.name,
            m.version,
            m.task,
            f"{m.size / 1e6:.2f} MB",
            m.sha256[:12],
            m.signed_by or "-",
            ago(m.pushed_at),
            shown,
        )
    return t


def device_figures(d: Any) -> tuple[bool, float, float, str, str]:
    """(online, fps, p95 ms, models, source): MQTT telemetry when the controller has some for the device,
    the agent's status reports otherwise. Online: the control stream or the telemetry status says so."""
    serving = ", ".join(sorted({p.model_ref for p in d.pipelines if not p.name.startswith("spec/")}))
    if d.HasField("telemetry"):
        t = d.telemetry
        models = ", ".join(sorted(set(t.models))) or serving
        return d.online or t.online, t.fps, t.latency_p95_ms, models or "-", "telemetry"
    return d.online, d.health.fps, d.health.latency_p95_ms, serving or "-", "status"


def devices_table(devices: list[Any]) -> Table:
    t = Table(title="devices")
    for col in ("device", "online", "health", "labels", "model", "fps", "p95 ms", "from", "last seen", "last event"):
        t.add_column(col, justify="right" if col in ("fps", "p95 ms") else "left", overflow="fold")
    for d in devices:
        online, fps, p95, models, source = device_figures(d)
        t.add_row(
            d.device_id,
            "[green]yes[/]" if online else "[red]no[/]",
            _health(d),
            ",".join(f"{k}={v}" for k, v in sorted(d.labels.items())),
            models,
            f"{fps:.1f}",
            f"{p95:.1f}",
            source,
            ago(max(d.last_seen, d.telemetry.last_seen)),
            d.last_event[:60],
        )
    return t


_HEALTH_STYLE = {"ok": "green", "degraded": "yellow", "down": "red", "offline": "red"}


def _health(d: Any) -> str:
    """The device's derived health (ok, degraded, down, offline, unknown), coloured."""
    state = d.health_state or "unknown"
    style = _HEALTH_STYLE.get(state)
    return f"[{style}]{state}[/]" if style else state


def _pipeline_healthy(p: Any) -> str:
    """``yes`` only when the pipeline runs and every camera streams: a pipeline whose cameras are all down
    used to read "healthy yes" at 0 fps."""
    if not p.health.healthy:
        return "[red]no[/]"
    cameras = [c for c in p.cameras if c.live]
    down = [c for c in cameras if c.state != "streaming"]
    if down:
        return f"[yellow]no: {len(down)} of {len(cameras)} camera(s) not streaming[/]"
    return "yes"


def _camera_state(state: str) -> str:
    style = "green" if state == "streaming" else ("red" if state == "failed" else "yellow")
    return f"[{style}]{state}[/]"


def device_detail(d: Any) -> list[Any]:
    head = Table(title=f"device {d.device_id}", show_header=False)
    head.add_column("what")
    head.add_column("value", overflow="fold")
    head.add_row("online", "yes" if d.online else "no")
    head.add_row("health", _health(d) + (f": {d.health_detail}" if d.health_detail else ""))
    head.add_row("labels", ", ".join(f"{k}={v}" for k, v in sorted(d.labels.items())) or "-")
    caps = MessageToDict(d.capabilities, preserving_proto_field_name=True)
    for k, v in caps.items():
        head.add_row(k, ", ".join(v) if isinstance(v, list) else str(v))
    head.add_row("first seen", ago(d.first_seen))
    head.add_row("last seen", ago(d.last_seen))
    head.add_row("last event", d.last_event or "-")
    if d.HasField("telemetry"):
        t = d.telemetry
        head.add_row(
            "telemetry",
            f"{'online' if t.online else 'offline'}, {t.fps:.1f} fps, p95 {t.latency_p95_ms:.1f} ms, "
            f"{', '.join(t.models) or '-'} (fleet {t.fleet}, {ago(t.last_seen)})",
        )
        if t.cameras:
            seen = "; ".join(f"{c.stream_id} {c.state}{f' ({c.reason})' if c.reason else ''}" for c in t.cameras)
            head.add_row("cameras (telemetry)", seen)
        if t.rejected:
            head.add_row("telemetry rejected", ", ".join(f"{k} {v}" for k, v in sorted(t.rejected.items())))
    specs = [p for p in d.pipelines if p.name.startswith("spec/")]
    for p in specs:  # a pipeline spec's own row: its version, last-good and health as a whole
        verdict = "healthy" if p.health.healthy else f"unhealthy: {p.health.detail}"
        good = p.last_good_ref.removeprefix("spec/") or "none yet"
        head.add_row("pipeline spec", f"{p.model_ref.removeprefix('spec/')} (last-good {good}), {verdict}")
    if not specs:
        head.add_row("pipeline spec", "none: the pipelines of the device's own agent.yaml")
    pipes = Table(title="pipelines")
    for col in ("pipeline", "spec", "model", "last-good", "state", "fps", "p95 ms", "frames", "dropped", "healthy"):
        pipes.add_column(col)
    for p in d.pipelines:
        if p.name.startswith("spec/"):
            continue
        pipes.add_row(
            p.name,
            p.spec_ref or "agent.yaml",
            p.model_ref,
            p.last_good_ref or "-",
            p.state,
            f"{p.health.fps:.1f}",
            f"{p.health.latency_p95_ms:.1f}",
            str(p.health.frames_in),
            str(p.health.dropped),
            _pipeline_healthy(p),
        )
    cameras = Table(title="cameras")
    for col in ("pipeline", "camera", "state", "reason", "for", "error"):
        cameras.add_column(col, overflow="fold")
    for p in d.pipelines:
        for c in p.cameras:
            cameras.add_row(
                p.name, c.stream_id, _camera_state(c.state), c.reason or "-", f"{c.state_seconds:.0f} s", c.detail or ""
            )
    desired = Table(title="desired state")
    for col in ("model", "target", "state", "last-good", "command", "message"):
        desired.add_column(col, overflow="fold")
    for x in d.desired:
        good = "yes" if x.last_good else "no"
        desired.add_row(x.model_name, x.model_ref, _styled(x.state), good, x.command_id, x.message)
    return [head, pipes, *([cameras] if cameras.row_count else []), desired]


def rollout_tables(r: Any) -> list[Any]:
    head = Table(title=f"rollout {r.rollout_id}", show_header=False)
    head.add_column("what")
    head.add_column("value", overflow="fold")
    what = "pipeline spec" if r.kind == "pipeline" else "model"
    head.add_row(what, f"{r.model_ref.removeprefix('spec/')} ({r.sha256[:12]})")
    head.add_row("selector", ",".join(f"{k}={v}" for k, v in sorted(r.selector.items())) or "(all)")
    head.add_row("state", _styled(r.state))
    head.add_row("wave", f"{r.current_wave + 1} of {len(r.waves)} ({','.join(r.waves)})")
    head.add_row("health window", f"{r.health_window_s:.0f} s")
    gates = [
        f"{name} {value:g}"
        for name, value in (
            ("min_shadow_f1", r.min_shadow_f1),
            ("max_class_mix_shift", r.max_class_mix_shift),
            ("max_detection_rate_change", r.max_detection_rate_change),
        )
        if value
    ]
    if gates:
        sampling = f"phase {r.shadow_phase or 'before'}, sample rate {r.shadow_sample_rate or 0.1:g}, "
        sampling += f"{r.shadow_min_frames or 30} frames"
        head.add_row("shadow gates", ", ".join(gates) + f" ({sampling})")
    grace = f"{r.camera_grace_s:g} s" if r.camera_grace_s else "the controller's"
    head.add_row("camera gate", "off" if r.cameras_may_be_down else f"every camera streaming (grace {grace})")
    head.add_row("message", r.message)
    devs = Table(title="devices")
    variants = any(m.variant for m in r.devices)
    for col in ("device", "wave", "state", "previous", *(("variant",) if variants else ()), "message"):
        devs.add_column(col, overflow="fold")
    for m in r.devices:
        extra = (m.variant or "-",) if variants else ()
        prev = m.previous_ref.removeprefix("spec/") or "-"
        devs.add_row(m.device_id, str(m.wave + 1), _styled(m.state), prev, *extra, m.message)
    return [head, devs]


def print_all(console: Console, items: list[Any]) -> None:
    for item in items:
        console.print(item)
