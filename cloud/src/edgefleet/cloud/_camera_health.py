"""Device health derived from its cameras (the ``cameras`` of each ``PipelineStatus`` an agent reports), and
the rollout gate "every camera streaming".

A camera (a live source) that is not ``streaming`` for longer than the grace (``--camera-grace``, default
10 s) makes the device ``degraded``; when no camera streams at all it is ``down``. Files and image folders are
not cameras and count for neither. ``offline`` and ``unknown`` (no report yet) come before any of that.
Kept apart from the other gates (fps, latency, quality) so each reads on its own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "DEFAULT_CAMERA_GRACE_S",
    "HEALTH_STATES",
    "camera_gate",
    "camera_params",
    "telemetry_cameras",
    "device_health",
    "not_streaming",
]

DEFAULT_CAMERA_GRACE_S = 10.0
HEALTH_STATES = ("ok", "degraded", "down", "offline", "unknown")


def _cameras(pipelines: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [c for p in pipelines for c in (p.get("cameras") or ()) if c.get("live", False)]


def _describe(c: Mapping[str, Any]) -> str:
    reason = c.get("reason") or ""
    why = f" ({reason})" if reason else ""
    return f"{c.get('stream_id', '?')} {c.get('state', '?')}{why} for {float(c.get('state_seconds', 0.0)):.0f} s"


def not_streaming(pipelines: Iterable[Mapping[str, Any]], grace_s: float) -> list[str]:
    """Each camera not streaming for longer than ``grace_s``, as ``cam1 reconnecting (refused) for 40 s``."""
    return [
        _describe(c)
        for c in _cameras(pipelines)
        if c.get("state", "") != "streaming" and float(c.get("state_seconds", 0.0)) > grace_s
    ]


def device_health(
    pipelines: list[Mapping[str, Any]], *, online: bool, reported: bool, grace_s: float
) -> tuple[str, str]:
    """(state, detail): ``ok``, ``degraded`` or ``down`` from the cameras; ``offline``; ``unknown``.

    >>> cam = {"stream_id": "door", "live": True, "state": "reconnecting", "reason": "refused", "state_seconds": 40.0}
    >>> device_health([{"cameras": [cam]}], online=True, reported=True, grace_s=10.0)
    ('down', 'door reconnecting (refused) for 40 s')
    """
    if not online:
        return "offline", ""
    if not reported:
        return "unknown", "no status report yet"
    cameras = _cameras(pipelines)
    bad = not_streaming(pipelines, grace_s)
    if cameras and not any(c.get("state") == "streaming" for c in cameras) and len(bad) == len(cameras):
        return "down", "; ".join(bad)
    if bad:
        return "degraded", "; ".join(bad)
    return "ok", ""


def telemetry_cameras(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``CameraHealth`` dicts from a stored telemetry message (protobuf JSON mapping, schema 2: each
    stream's ``state``, ``stateReason``, ``stateSeconds``); empty for a schema-1 message."""
    out = []
    for p in message.get("pipelines") or ():
        for s in p.get("streams") or ():
            if "state" not in s:
                continue
            out.append(
                {
                    "stream_id": s.get("streamId", ""),
                    "state": s.get("state", ""),
                    "reason": s.get("stateReason", ""),
                    "state_seconds": float(s.get("stateSeconds", 0.0)),
                    "live": bool(s.get("live", False)),
                    "detail": s.get("lastError", ""),
                }
            )
    return out


def camera_params(cameras_may_be_down: bool, camera_grace_s: float) -> dict[str, Any]:
    """The rollout params of the camera gate, as stored with the rollout."""
    return {"cameras_may_be_down": bool(cameras_may_be_down), "camera_grace_s": float(camera_grace_s)}


def camera_gate(pipelines: Iterable[Mapping[str, Any]], params: Mapping[str, Any], default_grace_s: float) -> str:
    """Why the rollout gate "every camera streaming" fails for these (serving) pipelines; "" when it passes
    or the rollout was created with ``cameras_may_be_down``."""
    if params.get("cameras_may_be_down", False):
        return ""
    grace = float(params.get("camera_grace_s") or default_grace_s)
    bad = not_streaming(pipelines, grace)
    return f"camera not streaming: {'; '.join(bad)}" if bad else ""
