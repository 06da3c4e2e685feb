"""``source_timeout_s``: a pipeline whose sources have not delivered one frame in time fails, naming each
camera with its state and reason, instead of waiting for ever (a dead camera at start-up)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from ._errors import SourceError
from ._flow import Flow
from ._metrics import PipelineStats, StreamMetrics, StreamStats
from ._redact import redact

__all__ = ["SourceTimeout", "waiting_streams", "watch_first_frames"]


class SourceTimeout(SourceError):  # noqa: N818 - reads as what it is
    """No source delivered a frame within the pipeline's ``source_timeout_s``."""


def waiting_streams(stats: PipelineStats) -> str:
    """Every stream that has no frame yet, with its state, reason and latest error (credentials redacted),
    e.g. ``cam reconnecting (refused): rtsp://…: stream cannot be opened: connection refused (…)``."""
    return describe(stats.streams.values())


def describe(streams: Iterable[StreamStats]) -> str:
    parts = []
    for st in streams:
        if st.frames_in:
            continue
        why = st.reason.value if st.reason is not None else "no frame yet"
        detail = f": {redact(st.last_error)}" if st.last_error else ""
        parts.append(f"{st.stream_id} {st.state.value} ({why}){detail}")
    return "; ".join(parts)


def watch_first_frames(
    flow: Flow, streams: Callable[[], Mapping[str, StreamMetrics]], timeout_s: float
) -> threading.Thread | None:
    """Start a thread that fails ``flow`` with :class:`SourceTimeout` when, ``timeout_s`` after the start,
    no stream has a frame; None when ``timeout_s`` is 0 (wait for ever)."""
    if timeout_s <= 0:
        return None

    def run() -> None:
        if flow.stop_sources.wait(timeout_s) or flow.done.is_set():
            return
        current = dict(streams())  # a copy: a live change may add or remove one meanwhile
        if current and not any(m.frames_in.total for m in current.values()):
            text = describe(m.snapshot() for m in current.values())
            flow.fail(
                "sources", SourceTimeout(f"no source delivered a frame within {timeout_s:g} s: {text}"), log=False
            )

    t = threading.Thread(target=run, name="edgefleet-source-watch", daemon=True)
    t.start()
    return t
