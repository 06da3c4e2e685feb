"""A real RTSP camera on loopback (GStreamer's RTSP server) that goes away and comes back."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from edgefleet.sdk import Pipeline, Result

from .rtsp_server import RtspServer, rtsp_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not rtsp_available(), reason="GStreamer RTSP server not installed (tools/ci/install-system-deps.sh)"
    ),
]

PASSWORD = "s3cr3t-pa55"


def _wait(pred, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_camera_outage_reconnects_and_pipeline_keeps_running(
    toy_models: dict[str, Path], clip: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = RtspServer(clip, user="viewer", password=PASSWORD, fps=20).start()
    results: list[Result] = []
    try:
        source = f"cam={server.url}#timeout_ms=1000"
        p = Pipeline(
            toy_models["yolo"],
            [source, "pattern=synthetic:?fps=20&width=160&height=120"],
            on_result=results.append,
        )
        p.start()
        assert _wait(lambda: sum(r.stream_id == "cam" for r in results) >= 20, 30), p.stats()
        server.kill()  # the camera vanishes
        assert _wait(lambda: p.stats().streams["cam"].outages >= 1, 20)
        before = sum(r.stream_id == "cam" for r in results)
        pattern_before = sum(r.stream_id == "pattern" for r in results)
        time.sleep(2)
        # the other stream kept flowing during the outage
        assert sum(r.stream_id == "pattern" for r in results) > pattern_before + 10
        server.restart()
        assert _wait(lambda: p.stats().streams["cam"].reconnects >= 1, 40), p.stats().streams["cam"]
        assert _wait(lambda: sum(r.stream_id == "cam" for r in results) >= before + 20, 30)
        back = p.stats().streams["cam"]
        assert back.last_error is None and back.recent_error  # healthy again; what went wrong is kept
        p.stop()
        p.wait(20)
        p.close()
    finally:
        server.stop()
    stats = p.stats()
    cam = stats.streams["cam"]
    assert cam.outages >= 1 and cam.reconnects >= 1 and cam.outage_seconds > 0
    seqs = [r.sequence for r in results if r.stream_id == "cam"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # the password never reaches logs, errors or metrics
    assert PASSWORD not in caplog.text
    assert "viewer:***@" in caplog.text
    assert PASSWORD not in json.dumps(asdict(stats), default=str)
    # every result names its camera, without the password
    cam_sources = {r.source for r in results if r.stream_id == "cam"}
    assert len(cam_sources) == 1 and "viewer:***@" in next(iter(cam_sources))
    assert all(PASSWORD not in json.dumps(r.to_dict()) for r in results)


def test_wrong_password_is_retried_and_never_logged(
    toy_models: dict[str, Path], clip: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = RtspServer(clip, user="viewer", password=PASSWORD).start()
    try:
        bad = server.url.replace(PASSWORD, "wrong-" + PASSWORD)
        p = Pipeline(toy_models["yolo"], [f"cam={bad}"])
        p.start()
        assert _wait(lambda: p.stats().streams["cam"].last_error is not None, 20)
        err = p.stats().streams["cam"].last_error or ""
        p.close()
    finally:
        server.stop()
    assert "cannot be opened" in err and PASSWORD not in err
    assert PASSWORD not in caplog.text
