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


class _TcpCamera:
    """A real TCP server on loopback that accepts camera connections and then either says nothing
    (``answer=None``: a hung camera) or answers every request with ``answer`` (e.g. an RTSP 503)."""

    def __init__(self, answer: bytes | None) -> None:
        import socket
        import threading

        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import threading

        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(conn)
            if self.answer is not None:
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: object) -> None:
        import socket

        assert isinstance(conn, socket.socket)
        conn.settimeout(5)
        try:
            while not self._stop.is_set():
                data = conn.recv(4096)
                if not data:
                    return
                cseq = next(
                    (
                        line.split(b":", 1)[1].strip()
                        for line in data.split(b"\r\n")
                        if line.lower().startswith(b"cseq")
                    ),
                    b"1",
                )
                conn.sendall((self.answer or b"").replace(b"{cseq}", cseq))
        except OSError:
            return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


def test_a_camera_that_takes_the_connection_and_says_nothing_is_connecting_then_timeout(
    toy_models: dict[str, Path],
) -> None:
    cam = _TcpCamera(None)
    try:
        p = Pipeline(toy_models["yolo"], [f"cam=rtsp://127.0.0.1:{cam.port}/x#open_timeout_ms=3000"])
        p.start()
        try:
            first = p.stats().streams["cam"]
            assert first.state is CameraState.CONNECTING, first  # opening: no frame yet
            st = _wait_state(p, "cam", CameraState.RECONNECTING, 30)
        finally:
            p.abort()
            p.close()
    finally:
        cam.close()
    assert st.reason is HealthReason.TIMEOUT and "does not answer RTSP" in (st.last_error or ""), st


def test_a_camera_that_answers_an_rtsp_error_reads_unreachable(toy_models: dict[str, Path]) -> None:
    cam = _TcpCamera(b"RTSP/1.0 503 Service Unavailable\r\nCSeq: {cseq}\r\n\r\n")
    try:
        st = _health_of(toy_models["yolo"], f"rtsp://127.0.0.1:{cam.port}/x", CameraState.RECONNECTING)
    finally:
        cam.close()
    assert st.reason is HealthReason.UNREACHABLE and "RTSP 503" in (st.last_error or ""), st


def test_a_file_ends_and_a_file_that_is_no_video_fails(toy_models: dict[str, Path], clip: Path, tmp_path: Path) -> None:
    p = Pipeline(toy_models["yolo"], [f"clip={clip}"], max_frames=5)
    p.run()
    st = p.stats().streams["clip"]
    assert st.state is CameraState.ENDED and st.reason is None, st  # stopped at max_frames: no reason
    whole = Pipeline(toy_models["yolo"], [f"clip={clip}"])
    whole.run()
    assert whole.stats().streams["clip"].state is CameraState.ENDED
    assert whole.stats().streams["clip"].reason is HealthReason.END_OF_STREAM
    bad = tmp_path / "not-a-video.mp4"
    bad.write_bytes(b"this is not a video" * 100)
    q = Pipeline(toy_models["yolo"], [f"bad={bad}"])
    with pytest.raises(PipelineError):
        q.run()
    st = q.stats().streams["bad"]
    assert st.state is CameraState.FAILED and st.reason is HealthReason.DECODE_ERROR, st
