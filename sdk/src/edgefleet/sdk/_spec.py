"""Pipeline specs: a versioned document of a device's pipelines (sources, model, analytics, sinks, batch,
device) that a fleet controller stores and rolls out, and the plan that applies a change of one
pipeline's config to it while it runs.

A spec's pipelines use the pipeline config's own schema (:class:`PipelineConfig`: strict, each source,
sink, analytics and backend entry validated against the kind its ``type`` selects in the registries),
with three rules of their own:

- ``model`` is a model *name* from the fleet's registry (``nanodet-m``), not a path: which version of it
  a device serves is the business of model rollouts; a device serves the version it holds.
- every source names its stream id (``{id: cam1, ...}`` or ``"cam1=rtsp://..."``): a change is applied
  by stream id, and default ids (``s0``, ``s1``) would shift when one source is removed.
- credentials are never written in a spec: a source URL names a secret, ``rtsp://${secret:cam1}@host/...``,
  and only the device it is sealed to can open it (``docs/security.md``). A URL with a password in it is
  refused when the spec is read.

Example::

    name: site-a
    version: 2
    pipelines:
      entrance:
        model: nanodet-m
        sources:
          - {type: network, id: cam1, url: "rtsp://${secret:cam1}@10.0.0.5/stream"}
          - {type: synthetic, id: test, fps: 5}
        analytics: [{type: track}, {type: zones, zones: [{name: door, points: [[0, 0], [320, 0], [320, 240]]}]}]
        max_batch: 4
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ._config import PipelineConfig
from ._errors import ConfigError
from ._names import NAME_RE
from ._sources import SourceConfig
from ._validation import format_validation_error

__all__ = [
    "SECRET_REF",
    "LivePlan",
    "PipelineSpec",
    "diff_specs",
    "load_pipeline_spec",
    "plan_live_change",
    "resolve_secrets",
    "secret_refs",
]

SECRET_REF = re.compile(r"\$\{secret:([a-z0-9][a-z0-9._-]{0,63})\}")
"""``${secret:<name>}``: where a device puts a secret sealed to it (``edgefleet secrets set``)."""
_NAMED = re.compile(r"^([A-Za-z0-9_.-]{1,64})=(?!=)")
_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/@?#]*)@")


class PipelineSpec(BaseModel):
    """A versioned pipeline spec (see the module's docstring for the rules)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="The spec's name, [a-z0-9][a-z0-9._-]{0,63}")
    version: int = Field(ge=1, description="Its version: each push of a name takes a new, higher one")
    description: str = Field("", max_length=2000)
    pipelines: dict[str, PipelineConfig] = Field(min_length=1, description="Named pipeline configs")
    connect_timeout_s: float = Field(
        20.0,
        gt=0,
        le=3600,
        description="Gate: a camera the spec adds or changes that has not connected within this long after "
        "the device applied the spec makes the device unhealthy (and the rollout fails its gate)",
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("must match [a-z0-9][a-z0-9._-]{0,63}")
        return v

    @field_validator("pipelines")
    @classmethod
    def _check_pipelines(cls, v: dict[str, PipelineConfig]) -> dict[str, PipelineConfig]:
        for name, pipe in v.items():
            if not NAME_RE.match(name):
                raise ValueError(f"pipeline name {name!r} must match [a-z0-9][a-z0-9._-]{{0,63}}")
            model = str(pipe.model)
            if not NAME_RE.match(model):
                raise ValueError(f"{name}: model must be a model name from the registry (nanodet-m), got {model!r}")
            ids: list[str] = []
            for i, item in enumerate(pipe.sources):
                sid = stream_id(item, i, explicit=True)
                if sid is None:
                    raise ValueError(f"{name}: sources.{i} needs a stream id ({{id: cam1, ...}} or 'cam1=<uri>')")
                ids.append(sid)
                for text in _strings(item.model_dump() if isinstance(item, SourceConfig) else item):
                    m = _USERINFO.match(text)
                    if m and ":" in SECRET_REF.sub("", m.group(1)):
                        raise ValueError(
                            f"{name}: stream {sid} has a password in its URL; put it in a sealed secret and "
                            "write rtsp://${secret:<name>}@host/... (docs/security.md)"
                        )
            dup = sorted({s for s in ids if ids.count(s) > 1})
            if dup:
                raise ValueError(f"{name}: stream id {dup[0]!r} is used twice")
        return v

    @model_validator(mode="after")
    def _unique_streams(self) -> PipelineSpec:
        seen: dict[str, str] = {}
        for name, pipe in self.pipelines.items():
            for i, item in enumerate(pipe.sources):
                sid = str(stream_id(item, i))
                if sid in seen:
                    raise ValueError(f"stream id {sid!r} is in pipelines {seen[sid]} and {name}")
                seen[sid] = name
        return self

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"

    def document(self) -> dict[str, Any]:
        """The spec as plain data, every field with its value (what is stored and sent: it reads back to
        the same spec)."""
        return self.model_dump(mode="json")

    def canonical(self) -> str:
        return json.dumps(self.document(), sort_keys=True, separators=(",", ":"))

    def sha256(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()


def stream_id(item: str | SourceConfig, index: int, *, explicit: bool = False) -> str | None:
    """The stream id of a pipeline config's source ``index`` (``explicit``: None when it has none of its
    own, only the default ``s<index>``). Source strings are not parsed (a file path is the device's, not
    something to look for where the spec is checked)."""
    if isinstance(item, SourceConfig):
        own = item.id
    else:
        m = _NAMED.match(item)
        own = m.group(1) if m else None
    if own is not None or explicit:
        return own
    return f"s{index}"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def load_pipeline_spec(data: str | bytes | Mapping[str, Any], source: str = "spec") -> PipelineSpec:
    """Read a spec from YAML text (or parsed data); errors name ``source`` and the field."""
    if isinstance(data, (str, bytes)):
        try:
            data = yaml.safe_load(data)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping at the top level (name, version, pipelines)")
    try:
        return PipelineSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def read_pipeline_spec(path: Path) -> PipelineSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such spec file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return load_pipeline_spec(text, str(path))


# --- secrets -------------------------------------------------------------------------------------------
def secret_refs(spec: PipelineSpec) -> set[str]:
    """The names of the secrets the spec's sources use."""
    return {m.group(1) for text in _strings(spec.document()) for m in SECRET_REF.finditer(text)}


def resolve_secrets(config: PipelineConfig, secrets: Mapping[str, str]) -> PipelineConfig:
    """``config`` with every ``${secret:name}`` replaced by its value (on the device; the result is never
    logged: the SDK redacts credentials in URLs). A secret the device does not hold is a ConfigError."""

    def sub(value: Any) -> Any:
        if isinstance(value, str):
            missing = [m.group(1) for m in SECRET_REF.finditer(value) if m.group(1) not in secrets]
            if missing:
                raise ConfigError(f"secret {missing[0]!r} is not sealed to this device (edgefleet secrets set)")
            return SECRET_REF.sub(lambda m: secrets[m.group(1)], value)
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        return value

    data = config.model_dump(mode="json")
    try:
        return PipelineConfig.model_validate(sub(data))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "pipeline (secrets resolved)")) from None


# --- diffs and live plans ----------------------------------------------------------------------------
def _named(items: tuple[Any, ...]) -> dict[str, Any]:
    """Sinks or analytics configs by the names a pipeline gives them: ``type``, ``type#2``, ..."""
    out: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for item in items:
        base = str(item.type)
        counts[base] = counts.get(base, 0) + 1
        out[base if counts[base] == 1 else f"{base}#{counts[base]}"] = item
    return out


def _sources(config: PipelineConfig) -> dict[str, str | SourceConfig]:
    return {str(stream_id(item, i)): item for i, item in enumerate(config.sources)}


def _dump(item: Any) -> Any:
    return item if isinstance(item, str) else item.model_dump(mode="json")


def _same(a: Any, b: Any) -> bool:
    return bool(_dump(a) == _dump(b))


_LIVE_FIELDS = {"sources", "sinks", "analytics"}


@dataclass
class LivePlan:
    """What changes between two configs of one pipeline, in the order it is applied."""

    remove_sources: list[str] = field(default_factory=list)
    replace_sources: dict[str, str | SourceConfig] = field(default_factory=dict)
    add_sources: dict[str, str | SourceConfig] = field(default_factory=dict)
    remove_sinks: list[str] = field(default_factory=list)
    replace_sinks: dict[str, Any] = field(default_factory=dict)
    add_sinks: dict[str, Any] = field(default_factory=dict)
    remove_analytics: list[str] = field(default_factory=list)
    replace_analytics: dict[str, Any] = field(default_factory=dict)
    add_analytics: dict[str, tuple[int, Any]] = field(default_factory=dict)
    restart: list[str] = field(default_factory=list)  # fields that change and cannot change live

    @property
    def empty(self) -> bool:
        return not any(
            (self.remove_sources, self.replace_sources, self.add_sources, self.remove_sinks, self.replace_sinks)
        ) and not any((self.add_sinks, self.remove_analytics, self.replace_analytics, self.add_analytics, self.restart))

    @property
    def touched_streams(self) -> set[str]:
        return {*self.remove_sources, *self.replace_sources, *self.add_sources}

    def lines(self) -> list[str]:
        out = [f"- stream {s}" for s in self.remove_sources]
        out += [f"~ stream {s}" for s in self.replace_sources]
        out += [f"+ stream {s}" for s in self.add_sources]
        out += [f"- sink {s}" for s in self.remove_sinks] + [f"~ sink {s}" for s in self.replace_sinks]
        out += [f"+ sink {s}" for s in self.add_sinks]
        out += [f"- analytics {s}" for s in self.remove_analytics]
        out += [f"~ analytics {s}" for s in self.replace_analytics]
        out += [f"+ analytics {s}" for s in self.add_analytics]
        out += [f"~ {f} (restarts the pipeline)" for f in self.restart]
        return out


def plan_live_change(old: PipelineConfig, new: PipelineConfig) -> LivePlan:
    """The live changes that turn pipeline ``old`` into ``new`` (by stream id, sink and stage name);
    ``restart`` lists the other fields that differ (model, device, backend, batch ...)."""
    plan = LivePlan()
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    plan.restart = sorted(k for k in a.keys() | b.keys() if k not in _LIVE_FIELDS and a.get(k) != b.get(k))
    so, sn = _sources(old), _sources(new)
    plan.remove_sources = [s for s in so if s not in sn]
    plan.replace_sources = {s: v for s, v in sn.items() if s in so and not _same(so[s], v)}
    plan.add_sources = {s: v for s, v in sn.items() if s not in so}
    ko, kn = _named(old.sinks), _named(new.sinks)
    plan.remove_sinks = [k for k in ko if k not in kn]
    plan.replace_sinks = {k: v for k, v in kn.items() if k in ko and not _same(ko[k], v)}
    plan.add_sinks = {k: v for k, v in kn.items() if k not in ko}
    ao, an = _named(old.analytics), _named(new.analytics)
    plan.remove_analytics = [k for k in ao if k not in an]
    plan.replace_analytics = {k: v for k, v in an.items() if k in ao and not _same(ao[k], v)}
    plan.add_analytics = {k: (i, v) for i, (k, v) in enumerate(an.items()) if k not in ao}
    kept = [k for k in an if k in ao]
    if kept != [k for k in ao if k in an]:  # stages that stay change their order: not a live change
        plan.restart.append("analytics order")
    return plan


def diff_specs(old: PipelineSpec | None, new: PipelineSpec) -> list[str]:
    """Human-readable lines of what ``new`` changes on a device that runs ``old`` (None: nothing yet)."""
    out: list[str] = []
    before = old.pipelines if old is not None else {}
    for name in before:
        if name not in new.pipelines:
            out.append(f"- pipeline {name}")
    for name, config in new.pipelines.items():
        if name not in before:
            out.append(f"+ pipeline {name} ({len(config.sources)} stream(s), model {config.model})")
            continue
        lines = plan_live_change(before[name], config).lines()
        out += [f"  {name}: {line}" for line in lines]
    if old is not None and old.connect_timeout_s != new.connect_timeout_s:
        out.append(f"~ connect_timeout_s {old.connect_timeout_s:g} -> {new.connect_timeout_s:g}")
    return out
