"""Per-camera health against real servers: GStreamer's RTSP server with and without a password, a closed
port, a name that does not resolve, a camera that freezes (SIGSTOP) and one that vanishes (SIGKILL).

Each of these reproduces a finding: a dead camera read as "running, healthy"; a wrong password read like a
wrong path; ``edgefleet run`` on a dead camera waited for ever and exited 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgefleet.sdk import CameraState, HealthReason, Pipeline, PipelineError, StreamStats

from .rtsp_server import RtspServer, free_port, rtsp_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not rtsp_available(), reason="GStreamer RTSP server not installed (tools/ci/install-system-deps.sh)"
    ),
]

PASSWORD = "h3alth-pa55"
EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


def _wait_state(p: Pipeline, sid: str, state: CameraState, timeout: float) -> StreamStats:
    deadline = time.monotonic() + timeout
    st = p.stats().streams[sid]
    while time.monotonic() < deadline:
        st = p.stats().streams[sid]
        if st.state is state:
            return st
        time.sleep(0.1)
    raise AssertionError(f"{sid} never reached {state.value}: {st}")


def _health_of(model: Path, url: str, state: CameraState, timeout: float = 25) -> StreamStats:
    p = Pipeline(model, [f"cam={url}#open_timeout_ms=2000&timeout_ms=1000"])
    p.start()
    try:
        return _wait_state(p, "cam", state, timeout)
    finally:
        p.abort()
        p.close()


def test_streaming_camera_reads_streaming(toy_models: dict[str, Path], clip: Path) -> None:
    with RtspServer(clip, fps=20) as server:
        st = _health_of(toy_models["yolo"], server.url, CameraState.STREAMING)
    assert st.reason is None and st.frames_in > 0 and st.state_seconds >= 0


def test_wrong_password_reads_unauthorized_not_a_wrong_path(toy_models: dict[str, Path], clip: Path) -> None:
    with RtspServer(clip, user="viewer", password=PASSWORD) as server:
        wrong = server.url.replace(PASSWORD, "nope")
        st = _health_of(toy_models["yolo"], wrong, CameraState.RECONNECTING)
        missing = _health_of(toy_models["yolo"], server.url_without_credentials, CameraState.RECONNECTING)
        good = _health_of(toy_models["yolo"], server.url, CameraState.STREAMING)
    assert st.reason is HealthReason.UNAUTHORIZED, st
    assert "credentials" in (st.last_error or "") and "nope" not in (st.last_error or "")
    assert missing.reason is HealthReason.UNAUTHORIZED and "needs credentials" in (missing.last_error or ""), missing
    assert good.reason is None


def test_wrong_path_reads_not_found(toy_models: dict[str, Path], clip: Path) -> None:
    with RtspServer(clip, user="viewer", password=PASSWORD) as server:
        url = server.url.replace("/stream", "/no-such-stream")
        st = _health_of(toy_models["yolo"], url, CameraState.RECONNECTING)
    assert st.reason is HealthReason.NOT_FOUND, st
    assert PASSWORD not in (st.last_error or "")


def test_closed_port_reads_refused(toy_models: dict[str, Path]) -> None:
    st = _health_of(toy_models["yolo"], f"rtsp://127.0.0.1:{free_port()}/stream", CameraState.RECONNECTING)
    assert st.reason is HealthReason.REFUSED and "refused" in (st.last_error or ""), st


def test_unresolvable_name_reads_dns(toy_models: dict[str, Path]) -> None:
    st = _health_of(toy_models["yolo"], "rtsp://camera-that-does-not-exist.invalid/stream", CameraState.RECONNECTING)
    assert st.reason is HealthReason.DNS, st


def test_frozen_camera_stalls_and_vanished_camera_reconnects(toy_models: dict[str, Path], clip: Path) -> None:
    server = RtspServer(clip, fps=20).start()
    p = Pipeline(toy_models["yolo"], [f"cam={server.url}#timeout_ms=4000&stall_s=1"])
    p.start()
    try:
        _wait_state(p, "cam", CameraState.STREAMING, 25)
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)  # the camera freezes: the connection stays, frames stop
        try:
            st = _wait_state(p, "cam", CameraState.STALLED, 10)
            assert st.reason is HealthReason.TIMEOUT
            st = _wait_state(p, "cam", CameraState.RECONNECTING, 30)  # FFmpeg's read gives up
            assert st.reason is HealthReason.TIMEOUT, st
        finally:
            os.kill(server.pid, signal.SIGCONT)
        server.kill()
        server.restart()
        _wait_state(p, "cam", CameraState.STREAMING, 40)
        server.kill()  # the camera vanishes: the connection closes
        st = _wait_state(p, "cam", CameraState.RECONNECTING, 20)
        assert st.reason in (HealthReason.END_OF_STREAM, HealthReason.REFUSED), st
    finally:
        p.abort()
        p.close()
        server.stop()


def test_pipeline_source_timeout_fails_naming_the_camera(toy_models: dict[str, Path]) -> None:
    port = free_port()
    p = Pipeline(toy_models["yolo"], [f"door=rtsp://u:{PASSWORD}@127.0.0.1:{port}/x"], source_timeout_s=2)
    p.start()
    with pytest.raises(PipelineError) as info:
        p.wait(30)
    p.close()
    text = str(info.value)
    assert "door reconnecting (refused)" in text and "within 2 s" in text, text
    assert PASSWORD not in text


def test_run_on_a_dead_camera_exits_non_zero_with_one_line(toy_models: dict[str, Path]) -> None:
    port = free_port()
    url = f"rtsp://viewer:{PASSWORD}@127.0.0.1:{port}/stream"
    started = time.monotonic()
    out = subprocess.run(
        [EDGEFLEET, "run", "-m", str(toy_models["yolo"]), "-s", f"cam={url}", "--source-timeout", "3", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode != 0 and time.monotonic() - started < 40
    lines = [line for line in out.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
    assert len(lines) == 1, out.stderr
    assert "cam reconnecting (refused)" in lines[0] and "within 3 s" in lines[0], lines
    assert PASSWORD not in out.stderr + out.stdout
