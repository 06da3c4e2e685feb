"""``edgefleet.sdk.kit``, the public helpers the members share: exactly these names, loaded on first use;
one broker-URL parser for agent and controller (each raising its own error); config files whose every
problem is one line naming the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import edgefleet.sdk.kit as kit
from edgefleet.sdk import ConfigError, ManifestError, load_pipeline_config

KIT = [
    "ACK_KIND",
    "AclTopics",
    "BrokerAddress",
    "CertificateRole",
    "GRPC_TARGET_SCHEMES",
    "INGEST_SHARE_GROUP",
    "JsonLinesFormatter",
    "LivePlan",
    "NAME_RE",
    "PipelineSpec",
    "ROLES",
    "SealingError",
    "TOPIC_KINDS",
    "TOPIC_ROOT",
    "TopicError",
    "ack_topic",
    "acl_topics",
    "attach_stub",
    "can_probe",
    "certificate_role",
    "check_model_file",
    "client_context",
    "common_name",
    "configure_logs",
    "connect_problem",
    "device_topic",
    "diff_specs",
    "distribution_version",
    "fail",
    "format_validation_error",
    "host_port_problem",
    "lazy_getattr",
    "load_pipeline_spec",
    "load_yaml_mapping",
    "parse_broker_url",
    "parse_topic",
    "plan_live_change",
    "public_key_pem",
    "read_pipeline_spec",
    "redact",
    "redact_uri",
    "resolve_secrets",
    "seal",
    "secret_refs",
    "set_log_fields",
    "set_log_level",
    "stream_id",
    "tcp_problem",
    "topic_filters",
    "topic_level_problem",
    "unseal",
    "validate_mapping",
]


def test_the_kit_exports_exactly_these_names() -> None:
    assert sorted(kit.__all__) == KIT
    for name in KIT:
        assert getattr(kit, name) is not None


def test_importing_the_kit_loads_nothing_heavy() -> None:
    heavy = "('numpy', 'pydantic', 'typer', 'yaml')"
    code = f"import sys, edgefleet.sdk.kit\nprint(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_agent_and_controller_parse_broker_urls_with_the_one_parser() -> None:
    from edgefleet.cloud._telemetry import TelemetryIngestError
    from edgefleet.cloud._telemetry import parse_broker_url as cloud_url
    from edgefleet.edge._telemetry import BrokerUrlError
    from edgefleet.edge._telemetry import parse_broker_url as edge_url

    for parse in (cloud_url, edge_url, kit.parse_broker_url):
        address = parse("mqtts://dev:s3cret@broker.example")
        assert type(address) is kit.BrokerAddress
        assert (address.port, address.tls, address.username) == (8883, True, "dev")
        assert "s3cret" not in repr(address) and address.redacted_url == "mqtts://dev:***@broker.example:8883"
    for parse, error in (
        (cloud_url, TelemetryIngestError),
        (edge_url, BrokerUrlError),
        (kit.parse_broker_url, ConfigError),
    ):
        with pytest.raises(error, match="must start with mqtt:// or mqtts://"):
            parse("ftp://broker.example")


def test_a_yaml_error_in_any_config_file_is_one_line(tmp_path: Path) -> None:
    from edgefleet.edge import AgentConfigError, load_agent_config

    bad = tmp_path / "bad.yaml"
    bad.write_text("model: m\nsources: [a.mp4\n")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "manifest.yaml").write_text("name: [x\n")
    from edgefleet.sdk import load_package

    for call, error in (
        (lambda: load_pipeline_config(bad), ConfigError),
        (lambda: load_agent_config(bad), AgentConfigError),
        (lambda: load_package(pkg), ManifestError),
    ):
        with pytest.raises(error) as info:
            call()
        message = str(info.value)
        assert "\n" not in message and "not valid YAML at line" in message, message
