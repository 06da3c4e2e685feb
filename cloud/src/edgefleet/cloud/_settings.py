"""The controller's settings (from ``edgefleet controller serve`` flags or a test)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._auth import TLSFiles

__all__ = ["ControllerSettings"]


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
    lease_s: float = 10.0
    stale_s: float = 30.0
    hello_timeout_s: float = 10.0
    default_health_window_s: float = 30.0
    max_artifact_bytes: int = 2 << 30
    max_message_bytes: int = 4 << 20
    grace_s: float = 5.0
    # Telemetry ingest (docs/telemetry.md): None keeps the controller off MQTT; gates use status reports only.
    mqtt_url: str | None = None  # mqtt://host:1883 or mqtts://user:pass@host:8883
    mqtt_fleet: str | None = None  # ingest only this fleet (None: every fleet)
    mqtt_ca_file: Path | None = None
    mqtt_cert_file: Path | None = None
    mqtt_key_file: Path | None = None
    tls: TLSFiles | None = None  # None: plain text (the CLI demands --insecure for that)
    admin_tokens: tuple[str, ...] = ()  # accepted as "authorization: Bearer <token>" on FleetService
    revoked_keys: frozenset[str] = frozenset()  # publisher key ids refused at push

    def __post_init__(self) -> None:
        if not self.replica_id:
            self.replica_id = f"{socket.gethostname()}:{self.listen.rsplit(':', 1)[-1]}"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"
