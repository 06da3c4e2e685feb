"""Telemetry configuration: one strict schema, validated once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ._mqtt_connection import BrokerAddress, parse_broker_url

__all__ = ["AnalyticsEventsConfig", "EventsConfig", "TelemetryConfig", "agent_section"]


EventKind = Literal["enter", "leave", "dwell", "cross", "track_end"]
_DEFAULT_KINDS: tuple[EventKind, ...] = ("enter", "leave", "dwell", "cross")


class AnalyticsEventsConfig(BaseModel):
    """Zone, line and track events of the pipelines' analytics stages, rate-limited per stream."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="publish analytics events at all")
    kinds: list[EventKind] = Field(
        default_factory=lambda: list(_DEFAULT_KINDS),
        description="which: zone enter/leave/dwell, line cross, track_end (one per ended track)",
    )
    max_per_s: float = Field(5.0, gt=0, description="events per second per stream, sustained (token bucket)")
    burst: int = Field(20, ge=1, description="events per stream allowed back to back")


class EventsConfig(BaseModel):
    """Which detection and analytics events are sent and how many. Swap, engine-build and error events are
    not limited."""

    model_config = ConfigDict(extra="forbid")

    detections: bool = Field(True, description="publish detection events at all")
    max_per_s: float = Field(2.0, gt=0, description="detection events per second, sustained (token bucket)")
    burst: int = Field(10, ge=1, description="detection events allowed back to back")
    min_score: float = Field(0.0, ge=0, le=1, description="drop detections scoring below this")
    labels: list[str] | None = Field(None, description="only these labels (None: all)")
    max_detections: int = Field(100, ge=1, description="detections kept per event (highest scores)")
    analytics: AnalyticsEventsConfig = Field(default_factory=AnalyticsEventsConfig)


class TelemetryConfig(BaseModel):
    """Where and how the agent publishes telemetry."""

    model_config = ConfigDict(extra="forbid")

    fleet: str = Field(description="fleet id, an MQTT topic level")
    device_id: str = Field(description="device id, an MQTT topic level")
    broker: str = Field("mqtt://127.0.0.1:1883", description="mqtt://host:1883 or mqtts://host:8883")
    username: str | None = None
    password: SecretStr | None = None
    ca_file: Path | None = Field(None, description="CA bundle that signed the broker's certificate (mqtts)")
    cert_file: Path | None = Field(None, description="client certificate (mqtts, mutual TLS)")
    key_file: Path | None = Field(None, description="client private key (mqtts, mutual TLS)")
    encoding: Literal["json", "protobuf"] = Field("json", description="payload encoding")
    interval_s: float = Field(10.0, gt=0, description="seconds between telemetry messages")
    keepalive_s: int = Field(30, ge=5, le=3600)
    connect_timeout_s: float = Field(5.0, gt=0)
    inflight_window: int = Field(64, ge=1, le=1000, description="QoS 1 messages awaiting PUBACK at once")
    delivery: Literal["controller", "broker"] = Field(
        "controller",
        description="what deletes a spooled message: a controller's acknowledgement that it stored it, or "
        "(without an edgefleet controller) the broker's PUBACK",
    )
    ack_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="controller delivery: send again what is not acknowledged after this"
    )
    spool_path: Path = Field(Path("telemetry-spool.db"), description="SQLite spool file")
    spool_max_entries: int = Field(100_000, ge=10)
    spool_max_bytes: int = Field(256 * 2**20, ge=4096)
    events: EventsConfig = Field(default_factory=EventsConfig)
    region_labels: int = Field(
        16,
        ge=1,
        le=1000,
        description="class labels per zone or line in telemetry and /metrics; later ones sum as 'other'",
    )
    gpu: Literal["auto", "nvml", "tegrastats", "none"] = "auto"
    prometheus_port: int | None = Field(None, ge=0, le=65535, description="serve /metrics here (0: any port)")
    prometheus_addr: str = "127.0.0.1"

    def broker_address(self) -> BrokerAddress:
        """The broker, with the client certificate checked against this device: a fleet certificate of
        another role, or of another device, would have every message refused by the broker's ACL."""
        address = parse_broker_url(
            self.broker,
            ca_file=self.ca_file,
            cert_file=self.cert_file,
            key_file=self.key_file,
            username=self.username,
            password=self.password.get_secret_value() if self.password else None,
        )
        if address.cert_file is not None:
            from edgefleet.sdk.kit import ROLES, certificate_role

            from ._errors import BrokerUrlError

            found = certificate_role(address.cert_file.read_bytes())  # parse_broker_url read it already
            if found.role in ROLES and found.role != "device":
                raise BrokerUrlError(
                    f"cert_file {address.cert_file} is a {found.role} certificate ({found.cn}); the agent "
                    f"needs its device certificate: edgefleet certs issue --device {self.device_id}"
                )
            if found.role == "device" and found.name != self.device_id:
                raise BrokerUrlError(
                    f"cert_file {address.cert_file} is device {found.name}'s certificate, this agent is "
                    f"{self.device_id}: the broker would refuse every message"
                )
        return address


def agent_section(raw: dict[str, Any], *, device_id: Any, state_dir: Path, base: Path) -> dict[str, Any]:
    """Fill an agent.yaml ``telemetry:`` mapping before validation.

    ``device_id`` defaults to the agent's, ``fleet`` to ``default``, ``spool_path`` to
    ``<state_dir>/telemetry-spool.db``; relative file paths are relative to the config file (``base``);
    ``prometheus_port: 0`` means off in an agent config (an operator scrapes a known port).
    """
    out = dict(raw)
    out.setdefault("device_id", device_id)
    out.setdefault("fleet", "default")
    for key in ("spool_path", "ca_file", "cert_file", "key_file"):
        value = out.get(key)
        if isinstance(value, str) and not Path(value).is_absolute():
            out[key] = str(base / value)
    if out.get("spool_path") is None:
        out["spool_path"] = str(state_dir / "telemetry-spool.db")
    if out.get("prometheus_port") == 0:
        out["prometheus_port"] = None
    return out
