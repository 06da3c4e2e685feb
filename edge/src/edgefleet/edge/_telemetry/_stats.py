"""Pipeline figures: an SDK ``PipelineStats`` snapshot as a ``Telemetry.Pipeline`` message."""

from __future__ import annotations

from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk import PipelineStats, redact_uri

__all__ = ["pipeline_message"]


def _latency(target: pb.Telemetry.Latency, p50: float, p95: float, p99: float) -> None:
    target.p50_ms = p50
    target.p95_ms = p95
    target.p99_ms = p99


def pipeline_message(name: str, stats: PipelineStats) -> pb.Telemetry.Pipeline:
    """Convert ``Pipeline.stats()`` for pipeline ``name``; error texts are passed through redaction.

    >>> from edgefleet.sdk import PipelineStats
    >>> pipeline_message("default", PipelineStats(1.0, 0, 0, 0.0, 0, {}, {}, {}, {}, 0.0, 0, 0.0, None)).name
    'default'
    """
    msg = pb.Telemetry.Pipeline(
        name=name,
        fps=stats.fps,
        frames_in=stats.frames_in,
        results=stats.results,
        dropped=stats.dropped,
        elapsed_s=stats.elapsed_s,
        batches=stats.batches,
        mean_batch=stats.mean_batch,
        copies_per_frame=stats.copies_per_frame,
        model_version=stats.model or "",
    )
    msg.queue_depths.update({k: max(0, int(v)) for k, v in stats.queues.items()})
    msg.pixel_copies.update({k: int(v) for k, v in stats.copies.get("counts", {}).items()})
    for stage in stats.stages.values():
        s = msg.stages.add(name=stage.name, items=stage.items, rate=stage.rate)
        _latency(s.latency, stage.p50_ms, stage.p95_ms, stage.p99_ms)
    errors = 0
    worst = (0.0, 0.0, 0.0)
    for st in stats.streams.values():
        stream_errors = st.outages
        errors += stream_errors
        s = msg.streams.add(
            stream_id=redact_uri(st.stream_id),
            live=st.live,
            fps=st.fps,
            frames_in=st.frames_in,
            results=st.results,
            dropped=st.dropped,
            reconnects=st.reconnects,
            outages=st.outages,
            outage_seconds=st.outage_seconds,
            pixel_copies=st.copies,
            errors=stream_errors,
            connected=st.connected,
            last_error=redact_uri(st.last_error) if st.last_error else "",
            model_version=st.model or "",
            recent_error=redact_uri(st.recent_error) if st.recent_error else "",
            state=st.state.value,
            state_reason=st.reason.value if st.reason is not None else "",
            state_seconds=st.state_seconds,
        )
        if st.recent_error_at is not None:
            s.recent_error_at.FromMicroseconds(round(st.recent_error_at * 1e6))
        _latency(s.latency, st.latency_p50_ms, st.latency_p95_ms, st.latency_p99_ms)
        if st.latency_p95_ms > worst[1]:
            worst = (st.latency_p50_ms, st.latency_p95_ms, st.latency_p99_ms)
    msg.errors = errors
    _latency(msg.latency, *worst)
    for stage_name, values in stats.analytics.items():
        msg.analytics.add(stage=stage_name, values={k: float(v) for k, v in values.items()})
    for q in stats.quality.values():  # the serving version and the one before it
        msg.quality.add(**q.to_dict())
    return msg
