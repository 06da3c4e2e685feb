"""Test support: run tools/rtsp/serve.py (a real GStreamer RTSP server).

The server needs Debian's python3-gi and the GstRtspServer typelib, so it is
started with the *system* interpreter (/usr/bin/python3), not the test
venv's. Install the packages with tools/ci/install-system-deps.sh.

    from tests.integration.rtsp_server import RtspServer, rtsp_available

    pytestmark = pytest.mark.skipif(not rtsp_available(), reason=RTSP_SKIP_REASON)

    with RtspServer(clip_path) as srv:
        cap = cv2.VideoCapture(srv.url, cv2.CAP_FFMPEG)
        ...
        srv.restart()   # same port: clients can reconnect to the same URL

No edgefleet imports: this module only uses the standard library.
"""

from __future__ import annotations

import functools
import os
import selectors
import signal
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

SYSTEM_PYTHON = "/usr/bin/python3"
REPO_ROOT = Path(__file__).resolve().parents[2]
SERVE_SCRIPT = REPO_ROOT / "tools" / "rtsp" / "serve.py"
HOST = "127.0.0.1"

RTSP_SKIP_REASON = (
    f"RTSP test server unavailable: {SYSTEM_PYTHON} cannot import gi + "
    "GstRtspServer (run tools/ci/install-system-deps.sh)"
)

_PROBE = (
    "import gi\n"
    "gi.require_version('Gst', '1.0')\n"
    "gi.require_version('GstRtspServer', '1.0')\n"
    "from gi.repository import Gst, GstRtspServer\n"
    "Gst.init(None)\n"
    "for e in ('rtph264pay', 'h264parse', 'qtdemux', 'appsrc', 'x264enc', 'videotestsrc'):\n"
    "    assert Gst.ElementFactory.find(e) is not None, e\n"
)


@functools.lru_cache(maxsize=1)
def rtsp_available() -> bool:
    """True if /usr/bin/python3 can import gi + GstRtspServer and the needed
    GStreamer elements exist. Cached; costs ~0.3 s the first time."""
    if not (os.path.exists(SYSTEM_PYTHON) and SERVE_SCRIPT.exists()):
        return False
    try:
        r = subprocess.run([SYSTEM_PYTHON, "-c", _PROBE], capture_output=True, timeout=30, env=_server_env())
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _server_env() -> dict[str, str]:
    env = dict(os.environ)
    # A venv's or pyenv's settings must not leak into the system interpreter.
    for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYENV_VERSION"):
        env.pop(var, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class RtspServerError(RuntimeError):
    pass


class RtspServer:
    """A tools/rtsp/serve.py subprocess bound to 127.0.0.1.

    file: an H.264 .mp4 served in an endless live-like loop; None serves a
    videotestsrc pattern (width/height/fps apply) instead.
    port: None picks a free port at the first start(); restart() keeps it.
    fps: for a file, overrides the file's frame rate (None = the file's).
    """

    def __init__(
        self,
        file: Path | str | None,
        port: int | None = None,
        user: str | None = None,
        password: str | None = None,
        fps: float | None = None,
        *,
        path: str = "/stream",
        width: int = 640,
        height: int = 360,
        shared: bool = False,
        pattern: str = "ball",
        ready_timeout: float = 20.0,
    ) -> None:
        if (user is None) != (password is None):
            raise ValueError("user and password go together")
        self.file = Path(file) if file is not None else None
        self.port = port
        self.user = user
        self.password = password
        self.fps = fps
        self.path = path if path.startswith("/") else "/" + path
        self.width = width
        self.height = height
        self.shared = shared
        self.pattern = pattern
        self.ready_timeout = ready_timeout
        self._proc: subprocess.Popen[str] | None = None
        self._stderr_path: Path | None = None
        self._stderr_file = None

    # ------------------------------------------------------------------ URLs
    @property
    def url(self) -> str:
        """rtsp://[user:pass@]127.0.0.1:port/path (credentials when given)."""
        if self.port is None:
            raise RtspServerError("server has no port yet: call start() first")
        cred = ""
        if self.user is not None:
            cred = f"{quote(self.user, safe='')}:{quote(self.password or '', safe='')}@"
        return f"rtsp://{cred}{HOST}:{self.port}{self.path}"

    @property
    def url_without_credentials(self) -> str:
        if self.port is None:
            raise RtspServerError("server has no port yet: call start() first")
        return f"rtsp://{HOST}:{self.port}{self.path}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -------------------------------------------------------------- control
    def _command(self) -> list[str]:
        cmd = [SYSTEM_PYTHON, str(SERVE_SCRIPT), "--port", str(self.port), "--path", self.path]
        if self.file is not None:
            cmd += ["--file", str(self.file)]
            if self.fps is not None:
                cmd += ["--fps", str(self.fps)]
        else:
            cmd += [
                "--pattern",
                self.pattern,
                "--width",
                str(self.width),
                "--height",
                str(self.height),
                "--fps",
                str(self.fps or 15),
            ]
        if self.user is not None:
            cmd += ["--user", self.user, "--password", self.password or ""]
        if self.shared:
            cmd.append("--shared")
        return cmd

    def _stderr_text(self) -> str:
        if self._stderr_path is None:
            return ""
        try:
            return self._stderr_path.read_text(errors="replace").strip()
        except OSError:
            return ""

    def start(self) -> RtspServer:
        if self.running:
            return self
        if not os.path.exists(SYSTEM_PYTHON):
            raise RtspServerError(f"{SYSTEM_PYTHON} not found; {RTSP_SKIP_REASON}")
        if self.file is not None and not self.file.is_file():
            raise RtspServerError(f"clip not found: {self.file}")
        if self.port is None:
            self.port = free_port()

        import tempfile

        # stderr goes to a file: a pipe nobody drains could fill and block
        # the server in the middle of a test.
        fd, name = tempfile.mkstemp(prefix="rtsp-server-", suffix=".log")
        os.close(fd)
        self._stderr_path = Path(name)
        self._stderr_file = open(self._stderr_path, "w")
        self._proc = subprocess.Popen(
            self._command(),
            cwd=REPO_ROOT,
            env=_server_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            text=True,
            bufsize=1,
        )
        try:
            self._wait_ready()
        except BaseException:
            self._kill()
            self._cleanup()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + self.ready_timeout
        sel = selectors.DefaultSelector()
        sel.register(self._proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RtspServerError(
                        f"RTSP server gave no READY within {self.ready_timeout:.0f}s "
                        f"(cmd: {' '.join(self._command())})\nstderr:\n{self._stderr_text()}"
                    )
                if not sel.select(timeout=min(left, 0.2)):
                    if self._proc.poll() is not None:
                        break
                    continue
                line = self._proc.stdout.readline()
                if not line:  # EOF: process exited
                    self._proc.wait(timeout=5)
                    break
                if line.startswith("READY "):
                    return
        finally:
            sel.close()
        raise RtspServerError(
            f"RTSP server exited with status {self._proc.returncode} before READY "
            f"(cmd: {' '.join(self._command())})\nstderr:\n{self._stderr_text()}"
        )

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Safe to call twice."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        self._cleanup()

    def kill(self) -> None:
        """SIGKILL at once (simulates a camera that vanishes abruptly)."""
        self._kill()
        self._cleanup()

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def _cleanup(self) -> None:
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None
        if self._stderr_file is not None:
            self._stderr_file.close()
            self._stderr_file = None
        if self._stderr_path is not None:
            self._stderr_path.unlink(missing_ok=True)
            self._stderr_path = None

    def restart(self, down_for: float = 0.0) -> RtspServer:
        """Stop, optionally stay down for `down_for` seconds, start on the same port."""
        self.stop()
        if down_for > 0:
            time.sleep(down_for)
        # The old listening socket is closed by process exit; the new server
        # sets SO_REUSEADDR (GIO does for listening sockets), so TIME_WAIT
        # connections do not block the bind. Retry briefly just in case.
        deadline = time.monotonic() + 5.0
        while True:
            try:
                return self.start()
            except RtspServerError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    @property
    def stderr(self) -> str:
        """What the server has written to stderr so far (while running)."""
        return self._stderr_text()

    # ------------------------------------------------------ context manager
    def __enter__(self) -> RtspServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self) -> None:  # last resort; tests should stop() explicitly
        try:
            self._kill()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RtspServer {self.url_without_credentials if self.port else '?'} {state}>"
