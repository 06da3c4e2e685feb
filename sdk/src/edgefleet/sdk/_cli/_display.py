"""Rich rendering of pipeline stats: the live table and the summary."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from .._health import CameraState
from .._metrics import PipelineStats, StreamStats

__all__ = ["live_table", "summary_tables"]

_STAGE_LABELS = {
    "queue": "queue wait (per frame)",
    "preprocess": "preprocess (per batch)",
    "infer": "inference (per batch)",
    "postprocess": "decode (per batch)",
    "sinks": "sinks (per batch)",
    "end_to_end": "capture → result (per frame)",
}


def live_table(stats: PipelineStats) -> Table:
    t = Table(title=f"edgefleet · {stats.model} · {stats.elapsed_s:.0f}s", expand=False)
    for col in (
        "stream",
        "state",
        "fps",
        "frames",
        "results",
        "dropped",
        "reconnects",
        "p50 ms",
        "p95 ms",
        "model",
    ):
        t.add_column(
            col,
            justify="right" if col not in {"stream", "state", "model"} else "left",
            min_width=9 if col == "state" else None,  # "streaming" whole
        )
    for s in stats.streams.values():
        t.add_row(
            s.stream_id,
            stream_state(s),
            f"{s.fps:.1f}",
            str(s.frames_in),
            str(s.results),
            str(s.dropped),
            str(s.reconnects),
            f"{s.latency_p50_ms:.1f}",
            f"{s.latency_p95_ms:.1f}",
            s.model or "",
        )
    return t


_STATE_STYLE = {
    CameraState.STREAMING: "green",
    CameraState.CONNECTING: "yellow",
    CameraState.STALLED: "yellow",
    CameraState.RECONNECTING: "yellow",
    CameraState.FAILED: "red",
}


def stream_state(s: StreamStats) -> str:
    """The state cell: ``streaming``, ``reconnecting: refused 12s``, ``failed: not_found``, ``ended``."""
    text = s.state.value
    if s.reason is not None:
        text += f": {s.reason.value}"
    if s.state is not CameraState.STREAMING and s.state is not CameraState.ENDED:
        text += f" {s.state_seconds:.0f}s"
    style = _STATE_STYLE.get(s.state)
    return f"[{style}]{text}[/]" if style else text


def summary_tables(stats: PipelineStats) -> list[Any]:
    head = Table(title="summary", show_header=False)
    head.add_column("what")
    head.add_column("value", justify="right")
    head.add_row("model", stats.model or "")
    head.add_row("frames in / results", f"{stats.frames_in} / {stats.results}")
    head.add_row("elapsed", f"{stats.elapsed_s:.2f} s")
    head.add_row("throughput", f"{stats.fps:.1f} frames/s")
    head.add_row("batches (mean size)", f"{stats.batches} ({stats.mean_batch:.2f})")
    head.add_row("dropped", str(stats.dropped))
    head.add_row("pixel copies per frame", f"{stats.copies_per_frame:.2f}")
    stages = Table(title="latency by stage (ms)")
    for col in ("stage", "items", "p50", "p95", "p99"):
        stages.add_column(col, justify="left" if col == "stage" else "right")
    for name, st in stats.stages.items():
        if st.items:
            stages.add_row(
                _STAGE_LABELS.get(name, name),
                str(st.items),
                f"{st.p50_ms:.2f}",
                f"{st.p95_ms:.2f}",
                f"{st.p99_ms:.2f}",
            )
    out: list[Any] = [head, stages]
    if len(stats.streams) > 1 or any(s.reconnects or s.dropped for s in stats.streams.values()):
        out.append(live_table(stats))
    if stats.detections_by_label:
        det = Table(title="detections by class")
        det.add_column("class")
        det.add_column("count", justify="right")
        for label, n in stats.detections_by_label.items():
            det.add_row(label, str(n))
        out.append(det)
    return out
