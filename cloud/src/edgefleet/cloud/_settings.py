"""The controller's settings (from ``edgefleet controller serve`` flags or a test)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    def __post_init__(self) -> None:
        if not self.replica_id:
            self.replica_id = f"{socket.gethostname()}:{self.listen.rsplit(':', 1)[-1]}"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"
