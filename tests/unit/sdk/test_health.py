"""The per-camera state machine on its own: transitions, time in state, stalled derived when read."""

from __future__ import annotations

import time

from edgefleet.sdk import CameraState, HealthReason
from edgefleet.sdk._health import SourceHealth


def test_starts_connecting_and_streams_at_the_first_frame() -> None:
    h = SourceHealth(stall_s=5.0)
    assert h.snapshot().state is CameraState.CONNECTING and h.first_frame is None
    h.frame(time.monotonic())
    snap = h.snapshot()
    assert snap.state is CameraState.STREAMING and snap.reason is None and h.first_frame is not None


def test_time_in_state_restarts_only_on_a_change() -> None:
    h = SourceHealth()
    h.set(CameraState.RECONNECTING, HealthReason.REFUSED)
    first = h.snapshot().since
    time.sleep(0.05)
    h.set(CameraState.RECONNECTING, HealthReason.REFUSED)  # the same again: a retry, not a change
    assert h.snapshot().since == first and h.snapshot().seconds >= 0.05
    h.set(CameraState.RECONNECTING, HealthReason.UNAUTHORIZED)
    assert h.snapshot().since > first and h.snapshot().reason is HealthReason.UNAUTHORIZED


def test_stalled_is_derived_from_the_last_frame_and_clears_with_the_next() -> None:
    h = SourceHealth(stall_s=0.1)
    h.frame(time.monotonic())
    time.sleep(0.25)
    snap = h.snapshot()
    assert snap.state is CameraState.STALLED and snap.reason is HealthReason.TIMEOUT
    assert 0.1 <= snap.seconds < 0.25
    h.frame(time.monotonic())
    assert h.snapshot().state is CameraState.STREAMING


def test_a_finite_source_never_stalls() -> None:
    h = SourceHealth(stall_s=float("inf"))
    h.frame(time.monotonic() - 3600)
    assert h.snapshot().state is CameraState.STREAMING


def test_the_live_table_shows_each_cameras_state_reason_and_time() -> None:
    import dataclasses

    from rich.console import Console

    from edgefleet.sdk._cli._display import live_table
    from tests.support.telemetry_stats import pipeline_stats

    stats = pipeline_stats()
    down = dataclasses.replace(
        stats.streams["cam"], state=CameraState.RECONNECTING, reason=HealthReason.UNAUTHORIZED, state_seconds=42.0
    )
    up = dataclasses.replace(stats.streams["cam"], stream_id="yard", state=CameraState.STREAMING, reason=None)
    console = Console(width=200, record=True)
    console.print(live_table(dataclasses.replace(stats, streams={"cam": down, "yard": up})))
    text = console.export_text()
    assert "reconnecting: unauthorized 42s" in text and "streaming" in text


def test_stall_seconds_follow_the_source_and_files_never_stall() -> None:
    from edgefleet.sdk import parse_source
    from edgefleet.sdk._health import stall_seconds

    assert stall_seconds(parse_source("rtsp://10.0.0.5/x#stall_s=2")) == 2.0
    assert stall_seconds(parse_source("rtsp://10.0.0.5/x")) == 5.0
    assert stall_seconds(parse_source("models/media/vtest-300.mp4")) == float("inf")
