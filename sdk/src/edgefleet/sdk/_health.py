"""Per-camera health: a small state machine each source runner drives, read by stats, telemetry and metrics.

::

    connecting ──frame──▶ streaming ──no frame for stall_s──▶ stalled ──frame──▶ streaming
        │  ▲                  │ stream lost                      │ stream lost
        │  └──── reopened ────┴──────────▶ reconnecting ◀────────┘
        └── error that is not retried (bad URI, pipeline error) ──▶ failed
    (a finite source at its end: ended)

The reason is one of a fixed set (:class:`HealthReason`), so a dashboard, an alert or a rollout gate can
group on it; the free text of the error stays in ``StreamStats.last_error``. ``stalled`` is derived when
read (a reader blocked in ``read()`` cannot say it is stalled): the state is ``streaming`` and the last
frame is older than ``stall_s``. The writer is the source's own thread; readers take :meth:`snapshot`.
The per-frame cost is one float store (:meth:`SourceHealth.frame`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["CameraState", "HealthReason", "HealthSnapshot", "SourceHealth", "reason_of", "stall_seconds"]


class CameraState(str, Enum):
    """Where a source stands now."""

    CONNECTING = "connecting"  # opening, no frame yet
    STREAMING = "streaming"  # frames arrive
    STALLED = "stalled"  # open, but no frame for longer than stall_s
    RECONNECTING = "reconnecting"  # the stream was lost (or never opened) and is retried with backoff
    FAILED = "failed"  # ended by an error that is not retried
    ENDED = "ended"  # a finite source (file, folder) reached its end, or the pipeline stopped


class HealthReason(str, Enum):
    """Why a source is not streaming: a fixed set, so it can label a metric and be grouped on."""

    REFUSED = "refused"  # the host answers, nothing listens on the port
    UNREACHABLE = "unreachable"  # no route, host down, or the server answers with an error
    DNS = "dns"  # the host name does not resolve
    UNAUTHORIZED = "unauthorized"  # wrong or missing credentials (RTSP 401/403)
    NOT_FOUND = "not_found"  # the server has no such stream (RTSP 404), or no such file/device
    TIMEOUT = "timeout"  # no answer, or no frame, within the time allowed
    DECODE_ERROR = "decode_error"  # the stream opens but yields no decodable video
    END_OF_STREAM = "end_of_stream"  # the server closed the stream, or a file ended


def stall_seconds(spec: Any) -> float:
    """A source's ``stall_s`` (its config's, default 5 s); a finite source (file, folder) never stalls: it
    waits whenever the pipeline is behind."""
    if not spec.live:
        return float("inf")
    config = getattr(spec, "config", None)
    return float(getattr(config, "stall_s", 5.0)) if config is not None else 5.0


def reason_of(exc: BaseException) -> HealthReason | None:
    """The reason an exception from a source carries (``exc.reason``), if any."""
    reason = getattr(exc, "reason", None)
    return reason if isinstance(reason, HealthReason) else None


@dataclass(frozen=True)
class HealthSnapshot:
    """One source's health at one moment: state, reason (None while streaming), since when (Unix s)."""

    state: CameraState
    reason: HealthReason | None
    since: float  # wall clock (Unix seconds) of the last change of state
    seconds: float  # time in this state


class SourceHealth:
    """The state machine of one source. Transitions: :meth:`set` (the runner), :meth:`frame` (per frame)."""

    def __init__(self, stall_s: float = 5.0) -> None:
        self.stall_s = stall_s
        self._lock = threading.Lock()
        self._state = CameraState.CONNECTING
        self._reason: HealthReason | None = None
        self._since_mono = time.monotonic()
        self._since_wall = time.time()
        #: monotonic time of the latest frame (0: none yet); written per frame without the lock
        self.last_frame = 0.0
        self.first_frame: float | None = None  # monotonic time of the first frame ever

    def set(self, state: CameraState, reason: HealthReason | None = None) -> None:
        """Enter ``state`` for ``reason``; the time in state restarts only when one of them changes."""
        with self._lock:
            if state is self._state and reason is self._reason:
                return
            self._state, self._reason = state, reason
            self._since_mono, self._since_wall = time.monotonic(), time.time()

    def frame(self, now: float) -> None:
        """A frame arrived at monotonic ``now``: streaming (the hot path: a store and a compare)."""
        self.last_frame = now
        if self._state is not CameraState.STREAMING:
            if self.first_frame is None:
                self.first_frame = now
            self.set(CameraState.STREAMING)

    @property
    def state(self) -> CameraState:
        return self.snapshot().state

    @property
    def reason(self) -> HealthReason | None:
        return self.snapshot().reason

    def snapshot(self) -> HealthSnapshot:
        now_mono, now_wall = time.monotonic(), time.time()
        with self._lock:
            state, reason, since_mono, since_wall = self._state, self._reason, self._since_mono, self._since_wall
        if state is CameraState.STREAMING:
            quiet = now_mono - max(self.last_frame, since_mono)
            if quiet > self.stall_s:  # derived: the reader is blocked in read() and cannot say so
                stalled_at = now_mono - quiet + self.stall_s
                return HealthSnapshot(
                    CameraState.STALLED,
                    HealthReason.TIMEOUT,
                    now_wall - (now_mono - stalled_at),
                    now_mono - stalled_at,
                )
        return HealthSnapshot(state, reason, since_wall, now_mono - since_mono)
