"""The controller's settings: a strict pydantic model (unknown fields refused, each field described),
built from ``edgefleet controller serve`` flags, a ``--config`` YAML file (``_controller_file.py``) or a
program. A value it cannot run on raises :class:`InvalidArgumentError` naming the setting; a value of the
wrong type raises :class:`SettingsError` naming the field."""

from __future__ import annotations

import math
import re
import socket
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, ValidationError, model_validator

from edgefleet.sdk.kit import INGEST_SHARE_GROUP, format_validation_error, host_port_problem

from ._auth import TLSFiles
from ._errors import InvalidArgumentError, SettingsError

__all__ = ["MAX_WINDOW_S", "ControllerSettings"]

MAX_WINDOW_S = 7 * 24 * 3600.0  # the longest health window a rollout may watch a device for
_KEY_ID = re.compile(r"[0-9a-f]{16}")


class ControllerSettings(BaseModel):
    """Everything the controller needs; defaults suit one machine with SQLite.

    >>> ControllerSettings(listen="127.0.0.1:0", allow_unsigned=True).tick_s
    0.5
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    db_url: str = Field("sqlite:///edgefleet-controller/controller.db", description="sqlite:///path or postgresql://…")
    listen: str = Field("127.0.0.1:50051", description="host:port the gRPC server listens on (port 0: any free)")
    data_dir: Path = Field(Path("edgefleet-controller"), description="the artifact store; shared between replicas")
    trusted_keys: dict[str, Any] = Field(default_factory=dict, description="publisher key id -> Ed25519PublicKey")
    allow_unsigned: bool = Field(False, description="accept unsigned packages (development only)")
    replica_id: str = Field("", description="this replica's name (default host:port)")
    status_interval_s: float = Field(5.0, description="seconds between agent status reports")
    tick_s: float = Field(0.5, description="seconds between rollout engine steps")
    sweep_s: float = Field(1.0, description="seconds between sweeps for offline devices")
    resend_s: float = Field(30.0, description="repeat a command the agent has not finished after this long")
    # A device that comes back on (or reports) another version than it applied is re-sent its command under
    # a new id: at once, then after retry_backoff_s doubling (to 300 s), max_attempts commands in all.
    max_attempts: int = Field(5, description="commands sent to a device that does not converge, the first included")
    retry_backoff_s: float = Field(5.0, description="seconds before the 2nd re-send; doubling to 300 s")
    reconcile_s: float = Field(2.0, description="how often completed rollouts' devices are checked")
    lease_s: float = Field(10.0, description="a replica's lease on a rollout, seconds")
    stale_s: float = Field(30.0, description="a device silent this long is offline")
    hello_timeout_s: float = Field(10.0, description="seconds an agent has to say hello")
    default_health_window_s: float = Field(30.0, description="default per-device health window, seconds")
    max_artifact_bytes: int = Field(2 << 30, description="largest artifact a push may upload")
    max_message_bytes: int = Field(4 << 20, description="largest gRPC message")
    grace_s: float = Field(5.0, description="seconds in-flight RPCs get at shutdown")
    camera_grace_s: float = Field(
        10.0, description="a camera not streaming this long makes its device degraded and fails a camera gate"
    )
    # Telemetry ingest (docs/telemetry.md): None keeps the controller off MQTT; gates use status reports only.
    mqtt_url: str | None = Field(None, description="mqtt://host:1883 or mqtts://user:pass@host:8883; None: no ingest")
    mqtt_fleet: str | None = Field(None, description="ingest only this fleet (None: every fleet)")
    mqtt_ca_file: Path | None = Field(None, description="CA of the broker's certificate (mqtts)")
    mqtt_cert_file: Path | None = Field(None, description="client certificate for the broker")
    mqtt_key_file: Path | None = Field(None, description="client key for the broker")
    mqtt_share_group: str = Field(INGEST_SHARE_GROUP, description="the ingest's shared-subscription group")
    metrics_listen: str | None = Field(None, description="host:port for Prometheus /metrics; None: off")
    tls: TLSFiles | None = Field(None, description="mTLS files; None: plain text (the CLI demands --insecure)")
    admin_tokens: tuple[str, ...] = Field((), description='accepted as "authorization: Bearer <token>"')
    revoked_keys: frozenset[str] = Field(frozenset(), description="publisher key ids refused at push")

    @model_validator(mode="wrap")
    @classmethod
    def _one_error(cls, data: Any, handler: ModelWrapValidatorHandler[ControllerSettings]) -> ControllerSettings:
        try:
            settings = handler(data)
        except ValidationError as exc:
            raise SettingsError(format_validation_error(exc, "controller settings")) from None
        settings._check()
        if not settings.replica_id:
            settings.replica_id = f"{socket.gethostname()}:{settings.listen.rsplit(':', 1)[-1]}"
        return settings

    def _check(self) -> None:
        """Refuse values the controller cannot run on (a NaN interval, a port out of range) at start-up,
        as InvalidArgumentError naming the setting, instead of failing later on every tick."""
        problem = host_port_problem(self.listen, lowest_port=0, grpc_targets=False)  # 0: any free port
        if problem:
            raise InvalidArgumentError(f"listen address {problem}")
        if self.metrics_listen is not None:
            problem = host_port_problem(self.metrics_listen, lowest_port=0, grpc_targets=False)
            if problem:
                raise InvalidArgumentError(f"--metrics-listen {problem}")
        if not self.mqtt_share_group or any(c in self.mqtt_share_group for c in "/+#"):
            raise InvalidArgumentError(f"--mqtt-share-group {self.mqtt_share_group!r} must be one topic level")
        names = ("status_interval_s", "tick_s", "sweep_s", "resend_s", "lease_s", "stale_s", "hello_timeout_s")
        for name in (*names, "retry_backoff_s", "reconcile_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InvalidArgumentError(f"{name} must be a number of seconds > 0, got {value}")
        if not (math.isfinite(self.default_health_window_s) and 0 <= self.default_health_window_s <= MAX_WINDOW_S):
            raise InvalidArgumentError(
                f"default_health_window_s must be 0..{MAX_WINDOW_S:.0f} seconds, got {self.default_health_window_s}"
            )
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise InvalidArgumentError(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        if not (math.isfinite(self.camera_grace_s) and self.camera_grace_s >= 0):
            raise InvalidArgumentError(f"--camera-grace must be >= 0 seconds, got {self.camera_grace_s}")
        if not (math.isfinite(self.grace_s) and self.grace_s >= 0):
            raise InvalidArgumentError(f"grace_s must be >= 0 seconds, got {self.grace_s}")
        bad = sorted(k for k in self.revoked_keys if not _KEY_ID.fullmatch(k))
        if bad:
            raise InvalidArgumentError(f"not a publisher key id (16 hex digits, `edgefleet keys`): {', '.join(bad)}")

    @property
    def report_gap_s(self) -> float:
        """A device silent this long during its health window is 'unknown' (three reports missed)."""
        return 3.0 * self.status_interval_s + 2.0

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"
