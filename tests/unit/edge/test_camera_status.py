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


def test_an_agent_without_status_cameras_is_judged_on_its_mqtt_telemetry() -> None:
    from edgefleet.cloud._camera_health import telemetry_cameras
    from edgefleet.cloud._convert import device_pb
    from edgefleet.cloud._telemetry import DeviceState

    message = {
        "pipelines": [
            {
                "streams": [
                    {
                        "streamId": "door",
                        "live": True,
                        "state": "reconnecting",
                        "stateReason": "dns",
                        "stateSeconds": 30.0,
                        "lastError": "rtsp://u:***@cam/1: the name does not resolve",
                    }
                ]
            },
            {"streams": [{"streamId": "old", "live": True}]},  # schema 1: no state, left out
        ]
    }
    cameras = telemetry_cameras(message)
    assert [c["stream_id"] for c in cameras] == ["door"]
    row = {
        "device_id": "d1", "labels": {}, "capabilities": {}, "first_seen": 0.0, "last_seen": 0.0,
        "pipelines": [{"name": "cam", "model_ref": "m:1"}], "desired": [], "health": {}, "last_event": "",
        "health_at": 1.0,
    }  # fmt: skip
    tel = DeviceState("d1", "f", True, 1.0, 0.0, 0.0, [], "0.1.0")
    d = device_pb(row, online=False, telemetry=tel, camera_grace_s=10.0, telemetry_cameras=cameras)
    assert (d.health_state, d.telemetry.cameras[0].reason) == ("down", "dns"), d
