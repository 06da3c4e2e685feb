"""A rollout's shadow gates (issue 22): validated when the rollout is created, kept in its params, and
sent in every apply command of it as ``ApplyModel.shadow``, so each device runs the candidate in shadow
beside its serving version before it cuts over and refuses it when the agreement misses a limit. The
refusal (``refused at shadow: shadow gate: shadow_f1 0.012 < min_shadow_f1 0.8; ...``) fails the member
with the KPI in its message, and the wave's failures abort the rollout as any other failure does.

Formulas of the KPIs: docs/operations.md, "Shadow gates".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from edgefleet.proto.v1 import agent_pb2

from ._errors import InvalidArgumentError

__all__ = ["GATES", "SHADOW_FIELDS", "shadow_params", "shadow_pb"]

#: the gates (any of them set adds a shadow phase) and the sampling, by their CreateRolloutRequest names
GATES = ("min_shadow_f1", "max_class_mix_shift", "max_detection_rate_change")
SHADOW_FIELDS = (*GATES, "shadow_sample_rate", "shadow_min_frames", "shadow_max_s")
_LIMITS: dict[str, tuple[float, float]] = {
    "min_shadow_f1": (0.0, 1.0),
    "max_class_mix_shift": (0.0, 1.0),
    "max_detection_rate_change": (0.0, 1000.0),
    "shadow_sample_rate": (0.0, 1.0),
    "shadow_min_frames": (0.0, 100_000.0),
    "shadow_max_s": (0.0, 3600.0),
}


def shadow_params(request: Any) -> dict[str, float]:
    """The shadow fields of a CreateRolloutRequest, checked (0: not set); {} when no gate is set."""
    out: dict[str, float] = {}
    for key in SHADOW_FIELDS:
        value = float(getattr(request, key))
        low, high = _LIMITS[key]
        if not (math.isfinite(value) and low <= value <= high):
            raise InvalidArgumentError(f"{key.replace('_', ' ')} must be {low:g}..{high:g} (0: not set), got {value}")
        if value:
            out[key] = value
    if out and not any(k in out for k in GATES):
        raise InvalidArgumentError(f"shadow sampling given without a shadow gate: set one of {', '.join(GATES)}")
    return out


def shadow_pb(params: Mapping[str, Any]) -> agent_pb2.ShadowGate | None:
    """``ApplyModel.shadow`` for a rollout's params; None: the rollout has no shadow gate."""
    if not any(params.get(k) for k in GATES):
        return None
    return agent_pb2.ShadowGate(
        sample_rate=float(params.get("shadow_sample_rate", 0.0)),
        min_frames=int(params.get("shadow_min_frames", 0)),
        max_s=float(params.get("shadow_max_s", 0.0)),
        min_f1=float(params.get("min_shadow_f1", 0.0)),
        max_class_mix_shift=float(params.get("max_class_mix_shift", 0.0)),
        max_detection_rate_change=float(params.get("max_detection_rate_change", 0.0)),
    )
