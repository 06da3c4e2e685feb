"""Frame sources: parse a URI into a spec, build the source for it."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from .._errors import SourceError
from .._redact import redact_uri
from ._base import Source, SourceDisconnected, SourceSpec
from ._images import IMAGE_SUFFIXES

__all__ = ["Source", "SourceDisconnected", "SourceSpec", "create_source", "parse_source"]

_ID_RE = re.compile(r"^([A-Za-z0-9_.-]{1,64})=(.+)$", re.S)
_DEV_RE = re.compile(r"^(?:/dev/video\d+|usb:\d+|v4l2:\d+)\Z")
_COMMON = {"queue", "realtime", "loop", "live"}
_TRANSPORTS = ("tcp", "udp", "udp_multicast", "http", "https")  # FFmpeg's rtsp_transport values
# What each kind of source reads beyond the common options, and the type each must parse as: a misspelt
# or unknown option is an error at parse time, not silently ignored (a typo in ``realtime`` would
# otherwise change how a file is paced without a word).
_OPTIONS: dict[str, dict[str, type]] = {
    "file": {},
    "images": {},
    "network": {"open_timeout_ms": int, "timeout_ms": int, "transport": str},
    "usb": {"width": int, "height": int, "fps": float},
    "gstreamer": {"timeout_ms": int},
    "synthetic": {"width": int, "height": int, "fps": float, "frames": int, "white_after": int},
    "nvdec": {"gpu": int, "matrix": str, "prefetch": int},
}


def _flag(value: str, name: str, uri: str) -> bool:
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise SourceError(f"{redact_uri(uri)}: option {name} must be true or false, got {value!r}")


def parse_source(text: str, index: int = 0) -> SourceSpec:
    """Turn a user's source string into a :class:`SourceSpec`.

    Forms (an optional ``name=`` prefix sets the stream id; the default is ``s<index>``)::

        clip.mp4 | file:clip.mp4          video file (never drops; ?realtime=1 paces it, ?loop=1 repeats)
        ./frames/                         folder of images, in name order
        rtsp://user:pass@host/path        RTSP camera (live: reconnects, drops the oldest under pressure)
        http(s)://host/stream.mjpg        network stream (live)
        /dev/video0 | usb:0               USB/V4L2 camera (?width=&height=&fps=)
        gst:<pipeline>                    GStreamer pipeline string (or any string with " ! ")
        nvdec:clip.mp4                    video file decoded on the GPU (NVDEC; ?gpu=N&matrix=bt709&prefetch=N)
        synthetic: | synthetic:?width=1280&height=720&fps=30&frames=300   test pattern

    Options common to all: ``queue`` (frames buffered per stream, default 4), ``live`` (override).
    """
    text = text.strip()
    if not text:
        raise SourceError("empty source")
    stream_id = f"s{index}"
    m = _ID_RE.match(text)
    if m and " " not in m.group(1):
        stream_id, text = m.group(1), m.group(2)

    options: dict[str, str] = {}
    kind: str
    uri = text
    lowered = text.lower()
    if lowered.startswith("gst:") or " ! " in text:
        kind, uri = "gstreamer", text[4:] if lowered.startswith("gst:") else text
    elif lowered.startswith(("rtsp://", "rtsps://", "http://", "https://", "rtmp://", "udp://", "srt://")):
        kind = "network"
        parts = urlsplit(text)
        if not parts.hostname:
            raise SourceError(f"{redact_uri(text)}: no host in this URL")
        # Our own options travel as a fragment so the camera's query string stays untouched.
        if parts.fragment:
            options = dict(parse_qsl(parts.fragment))
            uri = text.split("#", 1)[0]
    elif lowered.startswith("nvdec:"):
        kind = "nvdec"  # decoded on the GPU (PyNvVideoCodec); frames stay in device memory
        path_text, _, query = text[6:].partition("?")
        options = dict(parse_qsl(query))
        path = Path(path_text).expanduser()
        if not path.is_file():
            raise SourceError(f"{path_text}: no such video file")
        uri = str(path)
    elif lowered.startswith(("synthetic:", "pattern:", "test:")):
        kind = "synthetic"
        _, _, query = text.partition("?")
        options = dict(parse_qsl(query))
    else:
        path_text = text[5:] if lowered.startswith("file:") else text
        path_text, _, query = path_text.partition("?")
        options = dict(parse_qsl(query))
        if _DEV_RE.match(path_text):
            kind, uri = "usb", path_text
        else:
            path = Path(path_text).expanduser()
            if not path.exists():
                raise SourceError(f"{path_text}: no such file, folder or camera")
            kind = "images" if path.is_dir() or path.suffix.lower() in IMAGE_SUFFIXES else "file"
            uri = str(path)

    live_default = kind in {"network", "usb", "gstreamer", "synthetic"}
    live = _flag(options["live"], "live", text) if "live" in options else live_default
    try:
        queue = int(options.get("queue", "4"))
    except ValueError:
        raise SourceError(f"{redact_uri(text)}: option queue must be an integer") from None
    if not 1 <= queue <= 1024:
        raise SourceError(f"{redact_uri(text)}: option queue must be 1..1024")
    realtime = _flag(options.get("realtime", "0"), "realtime", text) or kind == "synthetic"
    loop = _flag(options.get("loop", "0"), "loop", text)
    extra = {k: v for k, v in options.items() if k not in _COMMON}
    _check_options(kind, extra, text)
    return SourceSpec(
        uri=uri,
        kind=kind,
        stream_id=stream_id,
        live=live,
        options=extra,
        queue_size=queue,
        realtime=realtime,
        loop=loop,
    )


def _check_options(kind: str, options: dict[str, str], text: str) -> None:
    known = _OPTIONS[kind]
    unknown = sorted(set(options) - set(known))
    if unknown:
        names = ", ".join(sorted({*known, *_COMMON}))
        raise SourceError(
            f"{redact_uri(text)}: unknown option {', '.join(unknown)} for a {kind} source (known: {names})"
        )
    transport = options.get("transport")
    if kind == "network" and transport is not None and transport not in _TRANSPORTS:
        raise SourceError(f"{redact_uri(text)}: transport must be one of {', '.join(_TRANSPORTS)}, got {transport!r}")
    for name, value in options.items():
        try:
            known[name](value)
        except ValueError:
            what = "an integer" if known[name] is int else "a number"
            raise SourceError(f"{redact_uri(text)}: option {name} must be {what}, got {value!r}") from None


def create_source(spec: SourceSpec) -> Source:
    """Build (not open) the source for a spec."""
    if spec.kind in {"file", "network", "usb"}:
        from ._opencv import OpenCVSource

        return OpenCVSource(spec)
    if spec.kind == "images":
        from ._images import ImageFolderSource

        return ImageFolderSource(spec)
    if spec.kind == "synthetic":
        from ._synthetic import SyntheticSource

        return SyntheticSource(spec)
    if spec.kind == "nvdec":
        from .._cuda._nvdec import NvdecSource

        return NvdecSource(spec)
    if spec.kind == "gstreamer":
        from ._gstreamer import GStreamerSource

        return GStreamerSource(spec)
    raise SourceError(f"unknown source kind {spec.kind!r}")
