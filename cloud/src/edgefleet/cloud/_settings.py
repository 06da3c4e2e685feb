"""The controller's settings (from ``edgefleet controller serve`` flags or a test)."""

from __future__ import annotations

import math
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgefleet.sdk._address import host_port_problem

from ._errors import InvalidArgumentError

if TYPE_CHECKING:
    from ._auth import TLSFiles

__all__ = ["MAX_WINDOW_S", "ControllerSettings"]

MAX_WINDOW_S = 7 * 24 * 3600.0  # the longest health window a rollout may watch a device for
_KEY_ID = re.compile(r"[0-9a-f]{16}")


@dataclass
class ControllerSettings:
    """Everything the controller needs; defaults suit one machine with SQLite."""

    db_url: str = "sqlite:///edgefleet-controller/controller.db"
    listen: str = "127.0.0.1:50051"
    data_dir: Path = Path("edgefleet-controller")
    trusted_keys: dict[str, Any] = field(default_factory=dict)  # key id -> Ed25519PublicKey
    allow_unsigned: bool = False
    replica_id: str = ""
    status_interval_s: float = 5.0
    tick_s: float = 0.5
    sweep_s: float = 1.0
    resend_s: float = 30.0  # repeat a command the agent has not finished (it ignores one in progress)
    # A device that comes back on (or reports) another version than it applied is re-sent its command under
    # a new id: at once, then after retry_backoff_s doubling (to 300 s), max_attempts commands in all.
    max_attempts: int = 5
    retry_backoff_s: float = 5.0
    reconcile_s: float = 2.0  # how often completed rollouts' devices are checked against their desired state
    lease_s: float = 10.0
    stale_s: float = 30.0
    hello_timeout_s: float = 10.0
    default_health_window_s: float = 30.0
    max_artifact_bytes: int = 2 << 30
    max_message_bytes: int = 4 << 20
    grace_s: float = 5.0
    # a camera not streaming this long makes its device "degraded" and fails a rollout's camera gate
    camera_grace_s: float = 10.0
    # Telemetry ingest (docs/telemetry.md): None keeps the controller off MQTT; gates use status reports only.
    mqtt_url: str | None = None  # mqtt://host:1883 or mqtts://user:pass@host:8883
    mqtt_fleet: str | None = None  # ingest only this fleet (None: every fleet)
    mqtt_ca_file: Path | None = None
    mqtt_cert_file: Path | None = None
    mqtt_key_file: Path | None = None
    mqtt_share_group: str = "edgefleet-ingest"  # the ingest shared subscription's group (every replica the same)
    metrics_listen: str | None = None  # host:port for Prometheus /metrics; None: off
    tls: TLSFiles | None = None  # None: plain text (the CLI demands --insecure for that)
    admin_tokens: tuple[str, ...] = ()  # accepted as "authorization: Bearer <token>" on FleetService
    revoked_keys: frozenset[str] = frozenset()  # publisher key ids refused at push

    def __post_init__(self) -> None:
        self._check()
        if not self.replica_id:
            self.replica_id = f"{socket.gethostname()}:{self.listen.rsplit(':', 1)[-1]}"

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
