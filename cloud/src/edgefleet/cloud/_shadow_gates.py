"""A rollout's shadow gates (issue 22): validated when the rollout is created, kept in its params, and
sent in every apply command of it as ``ApplyModel.shadow``, so each device runs the candidate in shadow
beside its serving version before it cuts over and refuses it when the agreement misses a limit. The
refusal (``refused at shadow: shadow gate: shadow_f1 0.012 < min_shadow_f1 0.8; ...``) fails the member
with the KPI in its message, and the wave's failures abort the rollout as any other failure does.

Formulas of the KPIs: docs/operations.md, "Model-quality gates".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from edgefleet.proto.v1 import agent_pb2

from ._errors import InvalidArgumentError
from ._fleet_store import Row

__all__ = ["GATES", "SHADOW_FIELDS", "quality_baselines", "quality_verdict", "shadow_params", "shadow_pb"]

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


PHASES = ("", "before", "after", "both")


def shadow_params(request: Any) -> dict[str, Any]:
    """The shadow fields of a CreateRolloutRequest, checked (0: not set); {} when no gate is set."""
    out: dict[str, Any] = {}
    for key in SHADOW_FIELDS:
        value = float(getattr(request, key))
        low, high = _LIMITS[key]
        if not (math.isfinite(value) and low <= value <= high):
            raise InvalidArgumentError(f"{key.replace('_', ' ')} must be {low:g}..{high:g} (0: not set), got {value}")
        if value:
            out[key] = value
    if out and not any(k in out for k in GATES):
        raise InvalidArgumentError(f"shadow sampling given without a shadow gate: set one of {', '.join(GATES)}")
    phase = str(request.shadow_phase)
    if phase not in PHASES:
        raise InvalidArgumentError(f"shadow phase must be before, after or both, got {phase!r}")
    if phase:
        if not out:
            raise InvalidArgumentError(f"shadow phase given without a shadow gate: set one of {', '.join(GATES)}")
        out["shadow_phase"] = phase
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
        phase=str(params.get("shadow_phase", "")),
    )


def quality_baselines(shadow: Mapping[str, Any], devices: list[Row], model_name: str) -> dict[str, Any]:
    """``{"baselines": {device: {pipeline: ModelQuality dict}}}``: what each device's pipelines of
    ``model_name`` saw on the version they serve when the rollout is created, kept in the rollout's params
    (the controller's own record of the baseline: it survives an agent restart, which empties the
    agent's). {} when the rollout has no quality gate."""
    if not any(shadow.get(k) for k in ("max_detection_rate_change", "max_class_mix_shift")):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for dev in devices:
        for p in dev.get("pipelines") or []:
            ref = str(p.get("model_ref", ""))
            if ref.split(":", maxsplit=1)[0] != model_name:
                continue
            q = next((q for q in p.get("quality") or [] if q.get("model_ref") == ref), None)
            if q is not None:
                out.setdefault(str(dev["device_id"]), {})[str(p.get("name", ""))] = dict(q)
    return {"baselines": out}


def quality_verdict(params: Mapping[str, Any], pipeline: Mapping[str, Any], target: str, device_id: str = "") -> str:
    """The health window's quality gate for one pipeline of a device: its new version (``target``)
    against the device's own baseline, the version it served before: the controller's record of it from
    when the rollout was created (``params["baselines"]``), else the previous version's figures in the
    device's status report. "" passes (or cannot judge yet: fewer than the shadow's ``min_frames`` frames
    on either side).

    * detection rate change = (dpf_new - dpf_base) / max(dpf_base, 0.01), dpf: detections per frame;
    * class mix shift = ½ · Σ |mix_new(l) - mix_base'(l)| over the labels the new version has output, where
      mix_base' is the baseline's mix restricted to those labels and renormalised ("other" left out).
    """
    rate_limit = float(params.get("max_detection_rate_change") or 0.0)
    mix_limit = float(params.get("max_class_mix_shift") or 0.0)
    if not rate_limit and not mix_limit:
        return ""
    need = int(params.get("shadow_min_frames") or 30)
    versions = {str(q.get("model_ref", "")): q for q in pipeline.get("quality") or []}
    new = versions.get(target)
    kept = ((params.get("baselines") or {}).get(device_id) or {}).get(str(pipeline.get("name", "")))
    base = kept if kept and kept.get("model_ref") != target else None
    if base is None:
        base = next((q for ref, q in versions.items() if ref != target), None)
    if new is None or base is None or min(float(new.get("frames", 0)), float(base.get("frames", 0))) < need:
        return ""
    name, base_ref = pipeline.get("name"), base.get("model_ref")
    dpf_new, dpf_base = float(new.get("detections_per_frame", 0.0)), float(base.get("detections_per_frame", 0.0))
    change = (dpf_new - dpf_base) / max(dpf_base, 0.01)
    if rate_limit and abs(change) > rate_limit:
        return (
            f"pipeline {name}: quality_detection_rate_change {change:+.3f} exceeds ±{rate_limit:g} "
            f"({dpf_new:.2f} detections per frame vs {dpf_base:.2f} on {base_ref})"
        )
    mix_new = {k: float(v) for k, v in (new.get("class_mix") or {}).items() if k != "other"}
    mix_base = {k: float(v) for k, v in (base.get("class_mix") or {}).items() if k in mix_new}
    if mix_limit and mix_new and sum(mix_base.values()) > 0:
        tn, tb = sum(mix_new.values()), sum(mix_base.values())
        shift = 0.5 * sum(abs(mix_new[k] / tn - mix_base.get(k, 0.0) / tb) for k in mix_new)
        if shift > mix_limit:
            return f"pipeline {name}: quality_class_mix_shift {shift:.3f} > {mix_limit:g} vs {base_ref}"
    return ""
