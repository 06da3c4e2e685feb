"""Each camera's state leaves the agent in both reports: the control plane's PipelineStatus.cameras and the
telemetry Stream (schema 2), credentials redacted; the controller derives device health and the gate."""

from __future__ import annotations

import dataclasses

from edgefleet.cloud._camera_health import camera_gate, device_health
from edgefleet.edge._camera_status import camera_statuses
from edgefleet.edge._telemetry._messages import SCHEMA
from edgefleet.edge._telemetry._stats import pipeline_message
from edgefleet.sdk import CameraState, HealthReason
from tests.support.telemetry_stats import pipeline_stats


def _down_stats():  # type: ignore[no-untyped-def]
    stats = pipeline_stats()
    cam = dataclasses.replace(
        stats.streams["cam"], state=CameraState.RECONNECTING, reason=HealthReason.UNAUTHORIZED, state_seconds=42.0
    )
    return dataclasses.replace(stats, streams={"cam": cam})


def test_telemetry_stream_carries_state_reason_and_time_in_state() -> None:
    msg = pipeline_message("default", _down_stats())
    stream = msg.streams[0]
    assert (stream.state, stream.state_reason, stream.state_seconds) == ("reconnecting", "unauthorized", 42.0)
    assert SCHEMA == 2


def test_status_cameras_are_redacted_and_feed_the_derived_device_health() -> None:
    cameras = camera_statuses(_down_stats().streams.values())
    assert cameras[0]["reason"] == "unauthorized" and "pw" not in cameras[0]["detail"]
    pipes = [{"name": "p", "cameras": cameras}]
    assert device_health(pipes, online=True, reported=True, grace_s=10)[0] == "down"
    assert device_health(pipes, online=True, reported=True, grace_s=60)[0] == "ok"  # within the grace
    assert device_health(pipes, online=False, reported=True, grace_s=10)[0] == "offline"
    streaming = {"stream_id": "yard", "state": "streaming", "live": True, "state_seconds": 100.0}
    both = [{"name": "p", "cameras": [*cameras, streaming]}]
    state, detail = device_health(both, online=True, reported=True, grace_s=10)
    assert (state, detail) == ("degraded", "rtsp://u:***@cam/1 reconnecting (unauthorized) for 42 s")
    assert camera_gate(both, {}, 10.0).startswith("camera not streaming: ")
    assert camera_gate(both, {"cameras_may_be_down": True}, 10.0) == ""
    assert camera_gate(both, {"camera_grace_s": 60.0}, 10.0) == ""
    a_file = {"stream_id": "f", "state": "ended", "live": False, "state_seconds": 100.0}
    assert device_health([{"cameras": [a_file]}], online=True, reported=True, grace_s=1)[0] == "ok"
