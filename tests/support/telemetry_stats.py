"""A PipelineStats as a running pipeline reports it: one stream with a password in its URL and error."""

from __future__ import annotations

from edgefleet.sdk import PipelineStats, StageStats, StreamStats


def pipeline_stats() -> PipelineStats:
    s = StreamStats(
        "rtsp://u:pw@cam/1",
        True,
        100,
        98,
        29.5,
        2,
        3,
        1,
        1.5,
        0,
        10.0,
        20.0,
        30.0,
        True,
        False,
        "cannot open rtsp://u:pw@cam/1",
        "det:2.0.0",
        recent_error="cannot open rtsp://u:pw@cam/1",
        recent_error_at=1_764_500_000.25,
    )
    return PipelineStats(
        elapsed_s=3.4,
        frames_in=100,
        results=98,
        fps=29.5,
        dropped=2,
        streams={"cam": s},
        stages={"infer": StageStats("infer", 50, 14.7, 5.0, 7.0, 9.0)},
        queues={"infer": 2, "post": 0},
        copies={"counts": {"host_to_device": 98, "device_to_host": 0}, "bytes": {}},
        copies_per_frame=0.98,
        batches=50,
        mean_batch=1.96,
        model="det:2.0.0",
    )
