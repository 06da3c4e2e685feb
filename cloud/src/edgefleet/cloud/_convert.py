"""Database rows ⇄ protobuf messages (the generated modules never leave edgefleet.cloud's internals)."""

from __future__ import annotations

from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict

from edgefleet.proto.v1 import common_pb2, fleet_pb2

from ._fleet_store import Row
from ._shadow_gates import SHADOW_FIELDS

__all__ = ["device_pb", "model_pb", "msg_dict", "pipelines_pb", "rollout_pb"]

from ._camera_health import DEFAULT_CAMERA_GRACE_S, device_health


def msg_dict(msg: Any) -> dict[str, Any]:
    """A message as a plain dict with snake_case keys (stored as JSON, printed by the CLI)."""
    out: dict[str, Any] = MessageToDict(msg, preserving_proto_field_name=True)
    return out


def model_pb(r: Row) -> fleet_pb2.Model:
    return fleet_pb2.Model(
        name=r["name"],
        version=r["version"],
        sha256=r["sha256"],
        size=r["size"],
        task=r["task"],
        signed_by=r["signed_by"],
        pushed_at=r["pushed_at"],
        description=r["description"],
    )


def pipelines_pb(rows: list[Row]) -> list[common_pb2.PipelineStatus]:
    return [ParseDict(p, common_pb2.PipelineStatus(), ignore_unknown_fields=True) for p in rows]


def device_pb(
    r: Row,
    *,
    online: bool,
    telemetry: Any = None,
    camera_grace_s: float = DEFAULT_CAMERA_GRACE_S,
    telemetry_cameras: list[dict[str, Any]] | None = None,
) -> fleet_pb2.Device:
    """``telemetry``: the device's ``DeviceState`` from the telemetry store, or None. The health state is
    derived from the cameras of its pipelines (:func:`~._camera_health.device_health`); from those of its
    newest MQTT telemetry (``telemetry_cameras``) when its status reports carry none (an older agent)."""
    pipes, reported = r["pipelines"], r.get("health_at", 0.0) > 0
    if telemetry_cameras and not any(p.get("cameras") for p in pipes):
        pipes, reported = [{"cameras": telemetry_cameras}], True
        online = online or bool(telemetry is not None and telemetry.online)
    state, detail = device_health(pipes, online=online, reported=reported, grace_s=camera_grace_s)
    msg = fleet_pb2.Device(
        device_id=r["device_id"],
        labels=r["labels"],
        capabilities=ParseDict(r["capabilities"], common_pb2.Capabilities(), ignore_unknown_fields=True),
        online=online,
        first_seen=r["first_seen"],
        last_seen=r["last_seen"],
        pipelines=pipelines_pb(r["pipelines"]),
        desired=[
            fleet_pb2.DesiredModel(
                model_name=d["model_name"],
                model_ref=d["ref"],
                sha256=d["sha256"],
                command_id=d["command_id"],
                rollout_id=d["rollout_id"],
                state=d["state"],
                message=d["message"],
                attempt=d.get("attempt", 1),
                last_good=d.get("last_good_at", 0.0) > 0,
            )
            for d in r["desired"]
        ],
        health=ParseDict(r["health"], common_pb2.Health(), ignore_unknown_fields=True),
        last_event=r["last_event"],
        health_state=state,
        health_detail=detail,
    )
    if telemetry is not None:
        t = telemetry
        msg.telemetry.CopyFrom(
            fleet_pb2.DeviceTelemetry(
                online=t.online,
                fps=t.fps or 0.0,
                latency_p95_ms=t.p95_ms or 0.0,
                last_seen=t.last_seen,
                models=[f"{m.get('name', '')}:{m.get('version', '')}" for m in t.models],
                fleet=t.fleet,
                agent_version=t.agent_version,
                rejected=t.rejected,
                acknowledged_seq=t.acked_seq,
                cameras=[ParseDict(c, common_pb2.CameraHealth()) for c in telemetry_cameras or ()],
            )
        )
    return msg


def rollout_pb(r: Row) -> fleet_pb2.Rollout:
    p = r["params"]
    out = fleet_pb2.Rollout(
        rollout_id=r["rollout_id"],
        model_ref=r["model_ref"],
        sha256=r["sha256"],
        selector=r["selector"],
        waves=r["waves"],
        state=r["state"],
        current_wave=r["current_wave"],
        message=r["message"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        health_window_s=p.get("health_window_s", 0.0),
        max_failure_ratio=p.get("max_failure_ratio", 0.0),
        min_fps=p.get("min_fps", 0.0),
        max_latency_ms=p.get("max_latency_ms", 0.0),
        kind="pipeline" if str(r["model_ref"]).startswith("spec/") else "model",
        cameras_may_be_down=bool(p.get("cameras_may_be_down", False)),
        camera_grace_s=float(p.get("camera_grace_s", 0.0)),
        devices=[
            fleet_pb2.RolloutDevice(
                device_id=m["device_id"],
                wave=m["wave"],
                state=m["state"],
                previous_ref=m["previous_ref"],
                message=m["message"],
                command_id=m["command_id"],
                variant=m.get("variant", ""),
            )
            for m in r["devices"]
        ],
    )
    for key in SHADOW_FIELDS:  # the shadow gates (0: not set)
        setattr(out, key, int(p.get(key, 0)) if key == "shadow_min_frames" else float(p.get(key, 0.0)))
    out.shadow_phase = str(p.get("shadow_phase", ""))
    return out
