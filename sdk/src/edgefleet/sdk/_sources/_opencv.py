"""Video files, RTSP/HTTP streams and USB/V4L2 cameras through OpenCV's FFmpeg and V4L2 back ends."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from .._address import tcp_failure
from .._errors import SourceError
from .._health import HealthReason
from .._redact import redact, redact_uri
from ._base import Source, SourceDisconnected, SourceSpec, SourceUnavailable
from ._configs import FileConfig, NetworkConfig, UsbConfig
from ._rtsp_probe import describe_status, rtsp_reason

__all__ = ["OpenCVSource"]

_log = logging.getLogger(__name__)
_DEV_RE = re.compile(r"^(?:/dev/video|usb:|v4l2:)(\d+)\Z")
# TCP ports of the network schemes whose reachability can be probed (udp://, srt:// cannot)
_TCP_PORTS = {"rtsp": 554, "rtsps": 322, "http": 80, "https": 443, "rtmp": 1935, "rtmps": 443}


def _quiet_ffmpeg() -> None:
    """Keep FFmpeg's own log lines (``[tcp @ 0x...] Connection to tcp://... failed``, at every retry of
    a camera that is down) off stderr: the runner logs each outage once, with the reason found by
    :func:`_why_unavailable`. OpenCV reads ``OPENCV_FFMPEG_LOGLEVEL`` at every FFmpeg capture open; -8 is
    AV_LOG_QUIET. A level the user set (16: errors, 24: warnings, 32: info) is kept."""
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")


_TCP_KINDS = {
    "dns": HealthReason.DNS,
    "refused": HealthReason.REFUSED,
    "timeout": HealthReason.TIMEOUT,
    "unreachable": HealthReason.UNREACHABLE,
}


def _why_unavailable(uri: str, timeout_s: float) -> tuple[HealthReason | None, str]:
    """Why a network stream did not open, for the error after "stream cannot be opened", with its reason.
    FFmpeg knew (connection refused, host not found, 401) but said so only in its own, silenced, log: a
    TCP connect to the stream's host and port finds it out again, and for RTSP one ``DESCRIBE`` tells a
    wrong password from a wrong path."""
    parts = urlsplit(uri)
    default = _TCP_PORTS.get(parts.scheme.lower())
    try:
        host, port = parts.hostname, parts.port or default
    except ValueError:  # a port that is no number
        host, port = None, None
    if not host or port is None or default is None:  # udp://, srt://: no TCP port to connect to
        return None, " (unreachable, refused or wrong credentials)"
    problem = tcp_failure(host, port, timeout_s)
    if problem is not None:
        return _TCP_KINDS.get(problem[0], HealthReason.UNREACHABLE), f": {problem[1]}"
    answer = rtsp_reason(describe_status(uri, timeout_s), credentials=parts.username is not None)
    if answer is not None:
        return answer[0], f": {answer[1]}"
    return None, f" ({host}:{port} answers: wrong path or credentials, or no video)"


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SourceError("video sources need OpenCV: pip install 'edgefleet-sdk[cpu]' (or [video])") from exc
    # OpenCV's own log lines can carry a camera URL with its password: keep them silent.
    logging_mod = getattr(getattr(cv2, "utils", None), "logging", None)
    if logging_mod is not None and hasattr(logging_mod, "setLogLevel"):
        logging_mod.setLogLevel(logging_mod.LOG_LEVEL_SILENT)
    elif hasattr(cv2, "setLogLevel"):
        cv2.setLogLevel(0)
    return cv2


class OpenCVSource(Source):
    """``file``, ``network`` (RTSP/HTTP) and ``usb`` sources (:class:`FileConfig`, :class:`NetworkConfig`,
    :class:`UsbConfig`).

    Network streams open with FFmpeg open/read timeouts (options ``open_timeout_ms``, default 5000, and
    ``timeout_ms``, default 2000) so a vanished camera is noticed instead of blocking forever; RTSP uses
    TCP unless ``transport=udp``.
    """

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        if not isinstance(spec.config, (FileConfig, NetworkConfig, UsbConfig)):
            raise SourceError(f"{redact_uri(spec.uri)}: OpenCV reads file, network and usb sources only")
        self.config: FileConfig | NetworkConfig | UsbConfig = spec.config
        self._cap: Any = None
        self._shape: tuple[int, int] | None = None

    def _open_capture(self) -> Any:
        cv2 = _cv2()
        config = self.config
        if isinstance(config, FileConfig):
            if not config.path.is_file():
                raise SourceError(f"{config.path}: no such video file")
            _quiet_ffmpeg()
            return cv2.VideoCapture(str(config.path), cv2.CAP_FFMPEG)
        if isinstance(config, UsbConfig):
            m = _DEV_RE.match(config.device)
            if m is None:
                raise SourceError(f"{config.device}: not a camera device (expected /dev/videoN or usb:N)")
            index = int(m.group(1))
            node = config.device if config.device.startswith("/dev/") else f"/dev/video{index}"
            if sys.platform.startswith("linux") and not os.path.exists(node):  # V4L2 index N is /dev/videoN
                raise SourceError(f"{config.device}: no such camera device ({node})")
            cap = cv2.VideoCapture(index, cv2.CAP_V4L2)
            for prop, value in (
                (cv2.CAP_PROP_FRAME_WIDTH, config.width),
                (cv2.CAP_PROP_FRAME_HEIGHT, config.height),
                (cv2.CAP_PROP_FPS, config.fps),
            ):
                if value is not None:
                    cap.set(prop, float(value))
            return cap
        open_timeout, timeout, transport = config.open_timeout_ms, config.timeout_ms, config.transport
        if config.url.lower().startswith(("rtsp://", "rtsps://")):
            # Read once by OpenCV when a capture opens; options apply to every FFmpeg capture in the process.
            os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = f"rtsp_transport;{transport}"
        # Both only work when given at open. A hung stream is noticed after about 3 x timeout_ms (FFmpeg
        # retries twice before read() returns False), a closed connection at once.
        params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, open_timeout, cv2.CAP_PROP_READ_TIMEOUT_MSEC, timeout]
        _quiet_ffmpeg()
        return cv2.VideoCapture(config.url, cv2.CAP_FFMPEG, params)

    def open(self) -> None:
        cv2 = _cv2()
        try:
            cap = self._open_capture()
        except cv2.error as exc:
            raise SourceError(f"{redact_uri(self.spec.uri)}: cannot open: {redact(str(exc))}") from None
        if not cap.isOpened():
            cap.release()
            if isinstance(self.config, FileConfig):
                raise SourceError(f"{redact_uri(self.spec.uri)}: not a readable video file")
            reason, why = self._why_not_open()
            raise SourceUnavailable(f"{redact_uri(self.spec.uri)}: {why}", reason=reason)
        self._cap = cap
        w = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
        h = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        self._shape = (h, w) if w > 0 and h > 0 else None

    def _why_not_open(self) -> tuple[HealthReason | None, str]:
        if not isinstance(self.config, NetworkConfig):
            return HealthReason.NOT_FOUND, "camera cannot be opened"
        probe_s = min(self.config.open_timeout_ms, 2000) / 1000
        reason, why = _why_unavailable(self.spec.uri, probe_s)
        return reason, "stream cannot be opened" + redact(why)

    def frame_shape(self) -> tuple[int, int] | None:
        return self._shape

    def nominal_fps(self) -> float | None:
        if self._cap is None:
            return None
        fps = float(self._cap.get(_cv2().CAP_PROP_FPS))
        return fps if 0 < fps < 1000 else None

    def frame_count(self) -> int | None:
        if self._cap is None or not isinstance(self.config, FileConfig):
            return None
        n = int(self._cap.get(_cv2().CAP_PROP_FRAME_COUNT))
        return n if n > 0 else None

    def read(self, out: np.ndarray | None) -> np.ndarray | None:
        cap = self._cap
        if cap is None:
            raise SourceDisconnected("not open")
        started = time.monotonic()
        ok, image = cap.read(out) if out is not None else cap.read()
        if not ok or image is None:
            if self.spec.live:
                # FFmpeg gives up on a hung stream after its read timeout; a closed one fails at once
                timeout_s = self.config.timeout_ms / 1000 if isinstance(self.config, NetworkConfig) else 2.0
                if time.monotonic() - started >= timeout_s * 0.9:
                    raise SourceDisconnected("no frame within the read timeout", reason=HealthReason.TIMEOUT)
                raise SourceDisconnected("stream ended", reason=HealthReason.END_OF_STREAM)
            if self.spec.loop:
                cap.set(_cv2().CAP_PROP_POS_FRAMES, 0)
                ok, image = cap.read(out) if out is not None else cap.read()
                if ok and image is not None:
                    return np.asarray(image)
            return None
        return np.asarray(image)

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None
