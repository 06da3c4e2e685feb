"""``edgefleet controller serve --config controller.yaml``: the serve flags in a file.

Each key is a flag's name with ``_`` for ``-`` (``--status-interval 5`` is ``status_interval: 5``;
repeatable flags take a list: ``trusted_key: [a.pub.pem, b.pub.pem]``). A flag given on the command line
wins over the file. Relative paths are relative to the file's folder. The file is validated once, strictly:
an unknown key, a value of the wrong type, an unreadable file each give one line naming the file and the
field (:class:`SettingsError`)::

    # controller.yaml
    db: postgresql://edgefleet@db.internal/edgefleet
    listen: 0.0.0.0:50051
    data_dir: /srv/edgefleet
    trusted_key: [keys/publisher.pub.pem]
    tls_cert: certs/controller.pem
    tls_key: certs/controller.key
    client_ca: certs/ca.pem
    mqtt: mqtts://broker.internal:8883
    mqtt_ca_file: certs/ca.pem
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from edgefleet.sdk.kit import load_yaml_mapping, validate_mapping

from ._errors import SettingsError

__all__ = ["ControllerFile", "load_controller_file"]


class ControllerFile(BaseModel):
    """The keys of a controller config file (every one optional: the flag's default applies)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    db: str | None = Field(None, description="sqlite:///path or postgresql://user@host/db")
    listen: str | None = Field(None, description="host:port to listen on")
    data_dir: Path | None = Field(None, description="artifact store (share it between replicas)")
    trusted_key: list[Path] | None = Field(None, description="publisher public keys (PEM)")
    allow_unsigned: bool | None = Field(None, description="accept unsigned packages (development only)")
    health_window: float | None = Field(None, description="default per-device health window, seconds")
    status_interval: float | None = Field(None, description="seconds between agent status reports")
    replica_id: str | None = Field(None, description="name of this replica (default host:port)")
    tick: float | None = Field(None, description="seconds between rollout engine steps")
    lease: float | None = Field(None, description="a replica's lease on a rollout, seconds")
    stale: float | None = Field(None, description="a device silent this long is offline, seconds")
    hello_timeout: float | None = Field(None, description="seconds an agent has to say hello")
    max_attempts: int | None = Field(None, description="commands sent to a device that does not converge")
    retry_backoff: float | None = Field(None, description="seconds before the 2nd re-send; doubling")
    mqtt: str | None = Field(None, description="ingest telemetry from this broker (mqtt:// or mqtts://)")
    fleet: str | None = Field(None, description="ingest only this fleet's telemetry")
    mqtt_ca_file: Path | None = Field(None, description="CA of the broker's certificate (mqtts)")
    mqtt_cert_file: Path | None = Field(None, description="client certificate for the broker")
    mqtt_key_file: Path | None = Field(None, description="client key for the broker")
    mqtt_share_group: str | None = Field(None, description="shared-subscription group of the ingest")
    metrics_listen: str | None = Field(None, description="serve Prometheus /metrics on host:port")
    camera_grace: float | None = Field(
        None, description="seconds a camera may be not streaming before its device reads degraded"
    )
    log_level: str | None = Field(None, description="DEBUG, INFO, WARNING")
    log_format: str | None = Field(None, description="text (UTC timestamps) or json (one object per line)")
    tls_cert: Path | None = Field(None, description="controller certificate (PEM)")
    tls_key: Path | None = Field(None, description="controller private key (PEM)")
    client_ca: Path | None = Field(None, description="fleet CA that client certificates need")
    crl: Path | None = Field(None, description="revocation list (re-read when it changes)")
    insecure: bool | None = Field(None, description="plain-text gRPC, no client identities (development only)")
    admin_token_file: Path | None = Field(None, description="file with admin tokens, one a line")
    revoked_key: list[str] | None = Field(None, description="publisher key ids refused at push")


def load_controller_file(path: Path) -> dict[str, Any]:
    """The settings ``path`` gives, as ``{flag name: value}`` (only the keys it has), paths resolved
    against its folder."""
    parsed = validate_mapping(ControllerFile, load_yaml_mapping(path, SettingsError), str(path), SettingsError)
    out: dict[str, Any] = {}
    for name in sorted(parsed.model_fields_set):
        value = getattr(parsed, name)
        if value is None:  # `key: null` in the file: the flag's default
            continue
        if isinstance(value, Path):
            value = path.parent / value
        elif isinstance(value, list) and value and isinstance(value[0], Path):
            value = [path.parent / v for v in value]
        out[name] = value
    return out
