"""Agent-side pieces: broker URLs, PipelineStats conversion, Prometheus, JSON logs, rate limit."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from edgefleet.cloud._cli import _telemetry_commands as tcli
from edgefleet.cloud._telemetry import TelemetryIngestError
from edgefleet.cloud._telemetry import parse_broker_url as cloud_url
from edgefleet.edge import _telemetry as tel
from tests.support.telemetry_stats import pipeline_stats


def test_exported_names() -> None:
    assert "TelemetryAgent" in tel.__all__ and "Spool" in tel.__all__
    assert all(hasattr(tel, n) for n in tel.__all__)


def test_broker_urls(tmp_path: Path) -> None:
    a = tel.parse_broker_url("mqtt://127.0.0.1")
    assert (a.host, a.port, a.tls) == ("127.0.0.1", 1883, False)
    from edgefleet.cloud._certs import init_ca

    ca = init_ca(tmp_path / "fleet-ca")
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"\x87 not PEM")
    b = tel.parse_broker_url("mqtts://dev:s3cret@broker.example:9999", ca_file=ca)
    assert (b.port, b.tls, b.username, b.password, b.ca_file) == (9999, True, "dev", "s3cret", ca)
    assert "s3cret" not in repr(b) and "s3cret" not in b.redacted_url
    assert tel.parse_broker_url("mqtts://h").port == 8883
    for bad, kw in (
        ("http://h", {}),
        ("mqtt://", {}),
        ("mqtt://h", {"ca_file": ca}),
        ("mqtts://h", {"ca_file": "/nope"}),
    ):
        with pytest.raises(tel.BrokerUrlError):
            tel.parse_broker_url(bad, **kw)  # type: ignore[arg-type]
    # read at parse time: in the publisher's thread a bad file used to end telemetry with a thread traceback
    for kw in ({"ca_file": junk}, {"cert_file": junk, "key_file": junk}):
        with pytest.raises(tel.BrokerUrlError, match="TLS files not usable"):
            tel.parse_broker_url("mqtts://h", **kw)  # type: ignore[arg-type]
    with pytest.raises(TelemetryIngestError, match="TLS files not usable"):
        cloud_url("mqtts://h", ca_file=junk)


def test_tail_refuses_names_that_are_not_one_topic_level() -> None:
    from edgefleet.cloud._telemetry._tail import tail

    nowhere = cloud_url("mqtt://127.0.0.1:1")  # never reached: the names are checked first
    for kw in ({"device_id": "cam/#"}, {"device_id": "cam+"}, {"device_id": "cam", "fleet": "a/b"}):
        with pytest.raises(TelemetryIngestError, match="must be one MQTT topic level"):
            tail(nowhere, **kw)  # type: ignore[arg-type]


def test_telemetry_show_reads_without_creating_and_names_the_problem(tmp_path: Path) -> None:
    from datetime import timedelta

    from edgefleet.cloud._telemetry._render import print_summary

    with pytest.raises(TelemetryIngestError, match="no controller database here"):
        print_summary(f"sqlite:///{tmp_path}/nope/c.db", "cam", timedelta(hours=1), json_out=True)
    assert not (tmp_path / "nope").exists(), "looking created the folder"
    (tmp_path / "other.db").touch()
    with pytest.raises(TelemetryIngestError, match=r"no such table: .* \(is this a controller database\?\)"):
        print_summary(f"sqlite:///{tmp_path}/other.db", "cam", timedelta(hours=1), json_out=True)
    with pytest.raises(TelemetryIngestError, match="the database is a URL: sqlite:///"):
        print_summary(str(tmp_path / "other.db"), "cam", timedelta(hours=1), json_out=True)


def test_pipeline_message_and_prometheus() -> None:
    msg = tel.pipeline_message("default", pipeline_stats())
    assert msg.fps == 29.5 and msg.queue_depths["infer"] == 2 and msg.pixel_copies["host_to_device"] == 98
    st = msg.streams[0]
    assert st.stream_id == "rtsp://u:***@cam/1" and "pw" not in st.last_error
    assert st.recent_error == "cannot open rtsp://u:***@cam/1"
    assert st.recent_error_at.ToMicroseconds() == 1_764_500_000_250_000
    assert (st.reconnects, st.errors, st.latency.p95_ms) == (3, 1, 20.0)
    assert msg.stages[0].latency.p99_ms == 9.0 and msg.latency.p95_ms == 20.0

    from edgefleet.proto.v1 import telemetry_pb2 as pb

    t = pb.Telemetry()
    t.pipelines.append(msg)
    t.system.cpu_pct = 12.0
    t.system.gpus.add(index=0, name="tegra", utilization_pct=55.0)
    reg = CollectorRegistry()
    reg.register(tel.TelemetryCollector(lambda: t, lambda: {"connected": 1.0, "spool_dropped_total": 3.0}))
    text = generate_latest(reg).decode()
    assert 'edgefleet_pipeline_fps{pipeline="default"} 29.5' in text
    assert "quantile=" not in text and "_ms" not in text  # histograms in seconds (from live stats), not gauges
    assert 'edgefleet_model_info{model="det",pipeline="default",version="2.0.0"} 1.0' in text
    assert 'edgefleet_gpu_utilization_ratio{gpu="0",name="tegra"} 0.55' in text
    assert "edgefleet_telemetry_spool_dropped_total 3.0" in text and "pw@" not in text


def test_json_lines_formatter_redacts() -> None:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(tel.JsonLinesFormatter(static={"device": "cam-1"}))
    log = logging.getLogger("edgefleet.test.jsonlog")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("lost %s", "rtsp://admin:hunter2@10.0.0.5/live", extra={"stream": "s0"})
    finally:
        log.removeHandler(handler)
    rec = json.loads(buf.getvalue())
    assert rec["level"] == "warning" and rec["device"] == "cam-1" and rec["stream"] == "s0"
    assert "hunter2" not in rec["msg"] and rec["logger"] == "edgefleet.test.jsonlog"


def test_token_bucket() -> None:
    now = [0.0]
    bucket = tel.TokenBucket(2.0, 3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] = 0.5
    assert bucket.take() and not bucket.take()


def test_identity_rejects_topic_wildcards() -> None:
    for bad in ("a/b", "+", "#", "", "$SYS"):
        with pytest.raises(tel.TelemetryError):
            tel.Identity(bad, "dev")


def test_durations() -> None:
    assert tcli.parse_duration("1h").total_seconds() == 3600
    assert tcli.parse_duration("90").total_seconds() == 90
    assert tcli.parse_duration("15m").total_seconds() == 900
    import typer

    with pytest.raises(typer.BadParameter):
        tcli.parse_duration("soon")
