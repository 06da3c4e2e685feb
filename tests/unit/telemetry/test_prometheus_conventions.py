"""The agent's /metrics follow Prometheus conventions, as ``promtool check metrics`` reads them, on the
figures of a real running pipeline: it used to fail (latencies as ``_ms`` gauges with a ``quantile``
label, percentages 0..100, no info metric)."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from edgefleet.edge._telemetry import TelemetryCollector
from edgefleet.edge._telemetry._stats import pipeline_message
from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk import Pipeline
from tests.support.promtool import check_metrics


def test_agent_metrics_pass_promtool_with_histograms_states_and_info(toy_models: dict[str, Path]) -> None:
    p = Pipeline(toy_models["yolo"], ["cam=synthetic:?fps=30&width=160&height=120"])
    p.start()
    try:
        deadline = time.monotonic() + 20
        while p.stats().results < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = p.stats()
    finally:
        p.abort()
        p.close()
    msg = pb.Telemetry()
    msg.pipelines.append(pipeline_message("default", stats))
    msg.system.cpu_pct = 50.0
    msg.system.gpus.add(index=0, name="Orin", utilization_pct=40.0)
    info = {"device": "d1", "fleet": "f", "agent_version": "0.1.0", "soc": "t234", "gpu": "Orin"}
    reg = CollectorRegistry()
    collector = TelemetryCollector(
        lambda: msg,
        lambda: {"connected": 1.0, "sent_total": 4.0},
        pipelines=lambda: {"default": stats},
        info=lambda: info,
        version="0.1.0",
    )
    reg.register(collector)
    text = check_metrics(generate_latest(reg).decode())
    n = stats.streams["cam"].results
    assert f'edgefleet_stream_latency_seconds_count{{pipeline="default",stream="cam"}} {float(n)}' in text
    assert 'edgefleet_stream_latency_seconds_bucket{le="+Inf",pipeline="default",stream="cam"}' in text
    assert 'edgefleet_stage_latency_seconds_bucket{le="0.001",pipeline="default",stage="infer"}' in text
    assert 'edgefleet_stream_state{pipeline="default",state="streaming",stream="cam"} 1.0' in text
    assert 'edgefleet_stream_up{pipeline="default",stream="cam"} 1.0' in text
    assert 'edgefleet_stream_frames_total{pipeline="default",stream="cam"}' in text
    assert "edgefleet_system_cpu_ratio 0.5" in text
    assert 'edgefleet_build_info{component="agent"' in text
    assert 'edgefleet_device_info{agent_version="0.1.0",device="d1",fleet="f",gpu="Orin",soc="t234"} 1.0' in text
