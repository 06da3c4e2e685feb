"""agent.yaml: a strict schema validated once at start-up; relative paths are relative to the file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from edgefleet.sdk import PipelineConfig
from edgefleet.sdk.kit import NAME_RE as _DEVICE_RE
from edgefleet.sdk.kit import host_port_problem, load_yaml_mapping, validate_mapping

from ._errors import AgentConfigError
from ._telemetry._config import TelemetryConfig, agent_section

__all__ = ["AgentConfig", "ControllerConfig", "load_agent_config"]

_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}\Z")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ControllerTLS(_Strict):
    """Mutual TLS to the controller: the fleet CA and this device's certificate (``edgefleet certs``)."""

    ca: Path = Field(description="Fleet CA certificate (PEM); the controller's certificate must chain to it")
    cert: Path = Field(description="This device's certificate (PEM); its common name is the device id")
    key: Path = Field(description="This device's private key (PEM, mode 0600)")
    server_name: str | None = Field(None, description="Name to verify when the address is not in the SANs")


class ControllerConfig(_Strict):
    address: str = Field("127.0.0.1:50051", description="Controller host:port")
    tls: ControllerTLS | None = Field(None, description="Mutual TLS; absent: plain text (a warning)")
    connect_timeout_s: float = Field(10.0, gt=0, description="Deadline to open the stream and get a Welcome")
    stream_max_s: float = Field(3600.0, gt=0, description="Deadline of one Connect stream; then reconnect")
    rpc_timeout_s: float = Field(15.0, gt=0, description="Deadline of short calls")
    backoff_initial_s: float = Field(1.0, gt=0)
    backoff_max_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _check_backoff(self) -> ControllerConfig:
        if self.backoff_initial_s > self.backoff_max_s:
            raise ValueError(f"backoff_initial_s {self.backoff_initial_s} exceeds backoff_max_s {self.backoff_max_s}")
        return self

    @field_validator("address")
    @classmethod
    def _check_address(cls, v: str) -> str:
        problem = host_port_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class AgentConfig(_Strict):
    """Example::

    device_id: cam-01
    labels: {site: plant-a}
    controller: {address: controller.example:50051}
    trusted_keys: [publisher.pub.pem]
    state_dir: /var/lib/edgefleet
    pipelines:
      entrance: {model: models/nanodet-m, sources: ["rtsp://cam/stream"]}
    """

    device_id: str = Field(description="Unique device name, [a-z0-9][a-z0-9._-]{0,63}")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels rollouts select on")
    controller: ControllerConfig = Field(default_factory=ControllerConfig)
    trusted_keys: tuple[Path, ...] = Field(default=(), description="Publisher public keys (PEM)")
    require_signature: bool = Field(True, description="Refuse unsigned model packages")
    revoked_keys: tuple[str, ...] = Field(
        default=(), description="Publisher key ids refused even when listed in trusted_keys"
    )
    state_dir: Path = Field(Path("edgefleet-agent"), description="Model store, downloads and agent state")
    download_rate_limit_kbps: float = Field(
        80_000.0,
        ge=0,
        allow_inf_nan=False,
        description="Cap on download speed, kilobits/s (0: none). The default, 80 Mbit/s (10 MB/s), limits how "
        "much a download competes with the pipelines of a small device (docs/benchmarks-control-plane.md)",
    )
    install_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="How much lower than the pipelines the thread that writes, verifies and installs "
        "downloads runs (nice increment; 0: the same priority)",
    )
    health_window_s: float | None = Field(
        None, ge=0, le=7 * 24 * 3600, allow_inf_nan=False, description="Overrides the controller's window (s)"
    )
    pipelines: dict[str, PipelineConfig] = Field(min_length=1, description="Named SDK pipeline configs")
    telemetry: TelemetryConfig | None = Field(
        None, description="MQTT telemetry (docs/telemetry.md); absent: no telemetry"
    )

    @field_validator("device_id")
    @classmethod
    def _check_id(cls, v: str) -> str:
        if not _DEVICE_RE.match(v):
            raise ValueError("must match [a-z0-9][a-z0-9._-]{0,63}")
        return v

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            if not _LABEL_RE.match(k) or not (val == "" or _LABEL_RE.match(val)):
                raise ValueError(f"{k}={val} is not a valid label (letters, digits, . _ / -)")
        return v

    @field_validator("telemetry")
    @classmethod
    def _check_telemetry(cls, v: TelemetryConfig | None, info: ValidationInfo) -> TelemetryConfig | None:
        if v is not None and v.device_id != info.data.get("device_id", v.device_id):
            raise ValueError(f"device_id {v.device_id} differs from the agent's; leave it out")
        return v


def _resolve(data: dict[str, Any], base: Path) -> dict[str, Any]:
    def rel(p: Any) -> Any:
        return str(base / p) if isinstance(p, str) and not Path(p).is_absolute() else p

    out = dict(data)
    if "state_dir" in out:
        if out["state_dir"] == "":  # would become the config's own folder
            raise ValueError("state_dir is empty; give a folder such as /var/lib/edgefleet")
        out["state_dir"] = rel(out["state_dir"])
    if isinstance(out.get("trusted_keys"), list):
        out["trusted_keys"] = [rel(p) for p in out["trusted_keys"]]
    ctl = out.get("controller")
    if isinstance(ctl, dict) and isinstance(ctl.get("tls"), dict):
        tls = ctl["tls"]
        out["controller"] = {
            **ctl,
            "tls": {k: rel(v) if k in ("ca", "cert", "key") else v for k, v in tls.items()},
        }
    if isinstance(out.get("telemetry"), dict):
        sd = out.get("state_dir")  # validated later; a wrong type must not crash here
        state_dir = Path(sd if isinstance(sd, str) and sd else "edgefleet-agent")  # the field's default
        out["telemetry"] = agent_section(
            out["telemetry"], device_id=out.get("device_id"), state_dir=state_dir, base=base
        )
    pipes = out.get("pipelines")
    if isinstance(pipes, dict):
        out["pipelines"] = {k: _resolve_pipeline(v, base) if isinstance(v, dict) else v for k, v in pipes.items()}
    return out


# Any "<scheme>:" other than the two path ones is not a path (rtsp://, synthetic:, gst:, usb:, a
# plugin's "ramp:"...): only paths are made relative to the config file.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_NAMED = re.compile(r"^([A-Za-z0-9_.-]{1,64})=(.+)$", re.S)


def _resolve_pipeline(pipe: dict[str, Any], base: Path) -> dict[str, Any]:
    """A pipeline's model, file sources and sink paths, relative to the config file like every other path
    in it (they used to be relative to the working directory, which under systemd is /)."""
    out = dict(pipe)
    if isinstance(out.get("model"), str) and not Path(out["model"]).is_absolute():
        out["model"] = str(base / out["model"])
    if isinstance(out.get("sources"), list):
        out["sources"] = [
            _resolve_source(s, base) if isinstance(s, str) else _resolve_path(s, base) for s in out["sources"]
        ]
    if isinstance(out.get("sinks"), list):
        out["sinks"] = [_resolve_path(k, base) for k in out["sinks"]]
    return out


def _resolve_path(item: Any, base: Path) -> Any:
    """A source or sink mapping's relative ``path`` (``{type: file, path: clip.mp4}``), relative to the file."""
    if isinstance(item, dict) and isinstance(item.get("path"), str) and not Path(item["path"]).is_absolute():
        return {**item, "path": str(base / item["path"])}
    return item


def _resolve_source(text: str, base: Path) -> str:
    named = _NAMED.match(text)
    prefix, rest = (f"{named.group(1)}=", named.group(2)) if named and " " not in named.group(1) else ("", text)
    scheme = ""
    for s in ("file:", "nvdec:"):
        if rest.lower().startswith(s):
            scheme, rest = rest[: len(s)], rest[len(s) :]
    if not rest or _SCHEME.match(rest) or " ! " in rest or rest.startswith("/dev/"):
        return text
    path, sep, query = rest.partition("?")
    if Path(path).is_absolute():
        return text
    return f"{prefix}{scheme}{base / path}{sep}{query}"


def load_agent_config(path: Path) -> AgentConfig:
    """Read and validate agent.yaml; errors name the file and the field."""
    data = load_yaml_mapping(path, AgentConfigError)
    try:
        resolved = _resolve(data, path.parent)
    except ValueError as exc:
        raise AgentConfigError(f"{path}: {exc}") from None
    return validate_mapping(AgentConfig, resolved, str(path), AgentConfigError)
