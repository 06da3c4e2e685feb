"""Each source's health (the SDK's per-camera state machine) as the ``cameras`` of a ``PipelineStatus``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from edgefleet.sdk import StreamStats, redact_uri

__all__ = ["camera_statuses"]


def camera_statuses(streams: Iterable[StreamStats]) -> list[dict[str, Any]]:
    """``CameraHealth`` dicts: stream id, state, reason ("" while streaming), seconds in state, live, the
    error now (credentials redacted).

    >>> from edgefleet.sdk import CameraState, HealthReason, StreamStats
    >>> st = StreamStats("door", True, 0, 0, 0.0, 0, 0, 0, 0.0, 0, 0.0, 0.0, 0.0, False, False, None, None,
    ...                  state=CameraState.RECONNECTING, reason=HealthReason.REFUSED, state_seconds=12.0)
    >>> camera_statuses([st])[0]["reason"]
    'refused'
    """
    return [
        {
            "stream_id": redact_uri(s.stream_id),
            "state": s.state.value,
            "reason": s.reason.value if s.reason is not None else "",
            "state_seconds": float(s.state_seconds),
            "live": s.live,
            "detail": redact_uri(s.last_error) if s.last_error else "",
        }
        for s in streams
    ]
