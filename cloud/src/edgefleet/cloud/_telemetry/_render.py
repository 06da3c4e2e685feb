"""Rich output for the telemetry CLI."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from ._errors import TelemetryIngestError
from ._mqtt_connection import BrokerAddress
from ._summary import analytics_summary
from ._validate import Parsed, Rejected

__all__ = ["print_live", "print_summary", "summary_line"]

_EVENTS_READ = 5000  # events of the window read to count the analytics ones (the newest)


def _ts(epoch: float | None) -> str:
    if not epoch:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def summary_line(p: Parsed) -> str:
    """One human line per message."""
    m = p.message
    if p.kind == "status":
        state = "online" if m.state == 1 else "offline"
        extra = " (last will)" if m.last_will else ""
        return f"{state}{extra} connection={m.connection} reason={m.reason or '-'}"
    if p.kind == "telemetry":
        parts = []
        for pl in m.pipelines:
            parts.append(
                f"{pl.name}: {pl.fps:.1f} fps p95 {pl.latency.p95_ms:.1f} ms drops {pl.dropped} "
                f"model {pl.model_version or '-'}"
            )
        s = m.system
        gpu = f" gpu {s.gpus[0].utilization_pct:.0f}%" if len(s.gpus) else ""
        parts.append(
            f"cpu {s.cpu_pct:.0f}% ram {s.ram_used_bytes / 2**30:.1f}/{s.ram_total_bytes / 2**30:.1f} GiB" + gpu
        )
        if m.spool.pending or m.spool.dropped:
            parts.append(f"spool {m.spool.pending} pending, {m.spool.dropped} dropped")
        return "; ".join(parts)
    return _event_line(m)


def _event_line(m: Any) -> str:
    kind = m.WhichOneof("kind")
    if kind == "detections":
        d = m.detections
        labels = ", ".join(f"{x.label} {x.score:.2f}" for x in d.detections[:5])
        return f"detections {d.stream_id}#{d.frame_sequence}: {labels}"
    if kind == "swap":
        sw = m.swap
        return f"swap {sw.pipeline} {sw.from_version} -> {sw.to_version}: {sw.Phase.Name(sw.phase)} {sw.reason}"
    if kind == "analytics":
        return _analytics_line(m.analytics)
    if kind == "engine_build":
        eb = m.engine_build
        done = " done" if eb.done else ""
        return f"engine build {eb.model_version} [{eb.target}] {eb.progress:.0%}{done} {eb.error}"
    return f"error {m.error.component}: {m.error.message}"


def _analytics_line(a: Any) -> str:
    what = a.Kind.Name(a.kind).removeprefix("KIND_").lower()
    extra = f" {a.direction}" if a.direction else ""
    extra += f" after {a.dwell_s:.1f} s" if a.dwell_s else ""
    extra += f" ({a.reason})" if a.reason else ""
    where = f" {a.region}" if a.region else ""
    return f"{what}{where}: {a.stream_id} {a.label} #{a.track_id}{extra} [{a.model_version}]"


def print_live(
    broker: BrokerAddress,
    device: str,
    *,
    fleet: str,
    kind: str,
    json_out: bool,
    count: int | None,
    timeout: float | None,
) -> None:
    from rich.console import Console
    from rich.markup import escape

    from ._tail import tail

    console = Console(highlight=False, emoji=False)
    seen = 0
    messages = tail(broker, device, fleet=fleet, kind=kind, timeout_s=timeout)  # checks the names first
    if not json_out:
        console.print(f"[dim]tailing {escape(device)} on {broker.redacted_url} (Ctrl-C to stop)[/]")
    try:
        for item in messages:
            if isinstance(item, Rejected):
                console.print(f"[yellow]rejected[/] {item.reason}: {item.detail}")
                continue
            if json_out:
                print(item.payload_json, flush=True)
            else:
                console.print(f"{_ts(item.time)} [bold]{item.kind:<9}[/] #{item.sequence} {summary_line(item)}")
            seen += 1
            if count is not None and seen >= count:
                break
    except KeyboardInterrupt:
        pass


def rejections_line(rejected: dict[str, dict[str, Any]]) -> str:
    """``malformed 3, schema 1 (last at 12:00:01, schema: ...)`` or ``-``."""
    if not rejected:
        return "-"
    counts = ", ".join(f"{reason} {r['count']}" for reason, r in sorted(rejected.items()))
    reason, last = max(rejected.items(), key=lambda item: item[1]["last_at"])
    return f"{counts} (last at {_ts(last['last_at'])}, {reason}: {last['last_detail'][:120]})"


def print_summary(db: str, device: str, window: timedelta, *, json_out: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    from sqlalchemy.exc import SQLAlchemyError

    from .._db import create_engine  # the controller's drivers: postgresql:// means psycopg 3
    from .._errors import DatabaseError
    from ._telemetry_store import TelemetryStore

    if db.startswith("sqlite:///"):  # reading: never create the file (or its folder) by looking
        path = Path(db.split("sqlite:///", 1)[1])
        if not path.is_file():
            raise TelemetryIngestError(f"{path}: no controller database here (see `controller serve --db`)")
    try:
        engine = create_engine(db)
    except DatabaseError as exc:
        raise TelemetryIngestError(str(exc)) from None
    try:
        store = TelemetryStore(engine, create=False)
        health = store.health(device, window)
        state = store.device(device)
        latest = store.recent(device, window, kind="telemetry", limit=1)
        oldest = store.recent(device, window, kind="telemetry", limit=1, first=True)
        window_events = store.recent(device, window, kind="events", limit=_EVENTS_READ)
        events = window_events[-10:]
        rejected = store.rejections(device)
    except SQLAlchemyError as exc:
        first = str(getattr(exc, "orig", None) or exc).splitlines()[0][:200]
        raise TelemetryIngestError(
            f"cannot read telemetry from {db.rsplit('@', maxsplit=1)[-1]}: {first} (is this a controller database?)"
        ) from None
    finally:
        engine.dispose()
    if state is None and not rejected:
        raise TelemetryIngestError(f"no telemetry from device {device!r} in this database")
    analytics = analytics_summary(
        latest[-1]["message"] if latest else None,
        oldest[0]["message"] if oldest else None,
        (e["message"] for e in window_events),
    )
    analytics["events_read"] = len(window_events)
    if json_out:
        out: dict[str, Any] = {
            "device": device,
            "window_s": window.total_seconds(),
            "health": health.to_dict(),
            "models": state.models if state else [],
            "latest": latest[-1]["message"] if latest else None,
            "events": [e["message"] for e in events],
            "analytics": analytics,
            "acknowledged_seq": state.acked_seq if state else 0,
            "rejected": rejected,  # since the database began, by reason
        }
        print(json.dumps(out, indent=2))
        return
    console = Console(highlight=False)
    fleet = state.fleet if state else "no stored telemetry"
    table = Table(title=f"{device} ({fleet}) over the last {window}", show_header=False)
    table.add_row("online", "[green]yes[/]" if health.online else "[red]no[/]")
    table.add_row("last seen", _ts(health.last_seen))
    table.add_row("fps (mean)", f"{health.fps:.1f}" if health.fps is not None else "-")
    table.add_row("p95 latency (worst)", f"{health.p95_ms:.1f} ms" if health.p95_ms is not None else "-")
    table.add_row("errors", str(health.errors))
    table.add_row("samples", str(health.samples))
    models = state.models if state else []
    table.add_row("models", ", ".join(f"{m['pipeline']}: {m['name']}:{m['version']}" for m in models) or "-")
    table.add_row("agent", (state.agent_version if state else "") or "-")
    table.add_row("acknowledged up to", str(state.acked_seq) if state and state.acked_seq else "-")
    table.add_row("rejected", rejections_line(rejected))
    console.print(table)
    if events:
        ev = Table(title="recent events")
        ev.add_column("seq")
        ev.add_column("event")
        for e in events:
            msg = e["message"]
            kind = next((k for k in ("detections", "swap", "engineBuild", "error", "analytics") if k in msg), "?")
            ev.add_row(str(e["seq"]), f"{kind}: {json.dumps(msg.get(kind))[:100]}")
        console.print(ev)
    _print_analytics(console, analytics, window)


def _print_analytics(console: Any, analytics: dict[str, Any], window: timedelta) -> None:
    from rich.table import Table

    if analytics["regions"]:
        t = Table(title=f"zones and lines (in / out: over the last {window}; total: since the stream started)")
        for col in ("pipeline", "stream", "zone / line", "class", "inside", "in", "out", "in total", "out total"):
            t.add_column(col, justify="right" if col in ("inside", "in", "out", "in total", "out total") else "left")
        for r in analytics["regions"]:
            zone = r["kind"] == "zone"
            t.add_row(
                r["pipeline"],
                r["stream"],
                f"{r['name']} ({r['kind']})",
                r["label"],
                str(r["inside"]) if zone else "",
                str(r["in_since"]),
                str(r["out_since"]),
                str(r["in_total"]),
                str(r["out_total"]),
            )
        console.print(t)
    if analytics["stages"]:
        st = Table(title="analytics stages (latest)")
        for col in ("pipeline", "stage", "counters"):
            st.add_column(col)
        for s in analytics["stages"]:
            values = ", ".join(f"{k} {v:g}" for k, v in sorted(s["values"].items()))
            st.add_row(s["pipeline"], s["stage"], values)
        console.print(st)
    if analytics["events"]:
        ev = Table(title=f"analytics events over the last {window}")
        for col in ("stream", "event", "zone / line", "count"):
            ev.add_column(col, justify="right" if col == "count" else "left")
        for e in analytics["events"]:
            ev.add_row(e["stream"], e["kind"], e["region"] or "-", str(e["events"]))
        console.print(ev)
        note = []
        if analytics["events_suppressed"]:
            note.append(f"{analytics['events_suppressed']} more rate-limited on the device")
        if analytics["events_read"] >= _EVENTS_READ:
            note.append(f"counted over the newest {_EVENTS_READ} events of the window")
        if note:
            console.print("[dim]" + "; ".join(note) + "[/]")
