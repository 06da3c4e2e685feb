"""The built-in sources' configs, each with the URI form that maps to it: one place per kind.

A kind's URI form says which strings are its own (prefixes such as ``rtsp://``, or a predicate for
forms without one, like a path) and turns such a string into the config's fields; the options after
``?`` (or ``#`` on network URLs, whose own query string is the camera's) are fields too, so the config
validates them and a misspelt one is an error naming the known ones. Nothing here imports a video
library: the factories in ``__init__`` do, when a source is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, field_validator

from .._errors import SourceError
from .._redact import redact_uri
from ._base import SourceConfig

__all__ = [
    "IMAGE_SUFFIXES",
    "FileConfig",
    "GStreamerConfig",
    "ImagesConfig",
    "NetworkConfig",
    "NvdecConfig",
    "SyntheticConfig",
    "UsbConfig",
    "UriForm",
    "query_options",
]

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}
_DEV_RE = re.compile(r"^(?:/dev/video\d+|usb:\d+|v4l2:\d+)\Z")
_NETWORK = ("rtsp://", "rtsps://", "http://", "https://", "rtmp://", "udp://", "srt://")


class UriForm:
    """How source strings map to one kind: ``prefixes`` (matched without regard to case) or ``match``
    (a predicate, for forms without a prefix), and ``parse(text) -> fields`` of its config."""

    def __init__(
        self,
        parse: Callable[[str], Mapping[str, Any]],
        *,
        prefixes: tuple[str, ...] = (),
        match: Callable[[str], bool] | None = None,
        positional: tuple[str, ...] = (),
    ) -> None:
        self.parse = parse
        self.prefixes = tuple(p.lower() for p in prefixes)
        self.match = match
        self.positional = positional  # fields the string itself gives (not options): left out of "known"


def query_options(text: str, sep: str = "?") -> tuple[str, dict[str, str]]:
    """``"clip.mp4?loop=1"`` -> ``("clip.mp4", {"loop": "1"})``."""
    rest, _, query = text.partition(sep)
    return rest, dict(parse_qsl(query))


def _path_part(text: str) -> tuple[str, dict[str, str]]:
    return query_options(text[5:] if text.lower().startswith("file:") else text)


def _existing(path_text: str) -> Path:
    path = Path(path_text).expanduser()
    if not path.exists():
        raise SourceError(f"{path_text}: no such file, folder or camera")
    return path


class _FileSource(SourceConfig):
    """A source that reads ``path`` (a sink must not write over it)."""

    path: Path = Field(description="What the source reads")

    @field_validator("path")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return v.expanduser()

    def uri(self) -> str:
        return str(self.path)

    def reads(self) -> Path | None:
        return self.path


class FileConfig(_FileSource):
    """A video file (``clip.mp4``, ``file:clip.mp4``): never drops; ``realtime`` paces it, ``loop`` repeats."""

    type: Literal["file"] = "file"


def _parse_file(text: str) -> dict[str, Any]:
    path_text, options = _path_part(text)
    return {**options, "path": str(_existing(path_text))}


FILE = UriForm(_parse_file, match=lambda _: True, positional=("path",))  # the fallback: anything else is a path


class ImagesConfig(_FileSource):
    """A folder of images in name order, or one image file (``./frames/``, ``photo.jpg``): never drops."""

    type: Literal["images"] = "images"


def _is_images(text: str) -> bool:
    path = Path(_path_part(text)[0]).expanduser()
    return path.suffix.lower() in IMAGE_SUFFIXES or path.is_dir()


def _parse_images(text: str) -> dict[str, Any]:
    path_text, options = _path_part(text)
    return {**options, "path": str(_existing(path_text))}


IMAGES = UriForm(_parse_images, match=_is_images, positional=("path",))


class NetworkConfig(SourceConfig):
    """An RTSP/HTTP/RTMP/UDP/SRT stream (live: reconnects with backoff, drops the oldest under pressure).
    Options go after ``#`` in a URL, so the camera's own query string is left alone."""

    live_default: ClassVar[bool] = True
    type: Literal["network"] = "network"
    url: str = Field(description="rtsp://user:pass@host/path, http(s)://, rtmp://, udp://, srt://")
    open_timeout_ms: int = Field(5000, ge=1, description="Longest wait to open the stream")
    timeout_ms: int = Field(2000, ge=1, description="Longest wait for a read (a hung stream is noticed at ~3x)")
    transport: Literal["tcp", "udp", "udp_multicast", "http", "https"] = Field(
        "tcp", description="RTSP transport (FFmpeg's rtsp_transport)"
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        if not v.lower().startswith(_NETWORK):
            raise ValueError(f"must start with one of {', '.join(_NETWORK)}")
        if not urlsplit(v).hostname:
            raise ValueError(f"{redact_uri(v)}: no host in this URL")
        return v

    def uri(self) -> str:
        return self.url


def _parse_network(text: str) -> dict[str, Any]:
    if not urlsplit(text).hostname:
        raise SourceError(f"{redact_uri(text)}: no host in this URL")
    url, options = query_options(text, "#")
    return {**options, "url": url}


NETWORK = UriForm(_parse_network, prefixes=_NETWORK, positional=("url",))


class UsbConfig(SourceConfig):
    """A USB/V4L2 camera (``/dev/video0``, ``usb:0``): live."""

    live_default: ClassVar[bool] = True
    type: Literal["usb"] = "usb"
    device: str = Field(pattern=r"^(?:/dev/video\d+|usb:\d+|v4l2:\d+)$", description="/dev/videoN, usb:N or v4l2:N")
    width: int | None = Field(None, ge=1, description="Capture width asked of the camera")
    height: int | None = Field(None, ge=1, description="Capture height asked of the camera")
    fps: float | None = Field(None, gt=0, description="Frame rate asked of the camera")

    def uri(self) -> str:
        return self.device


def _parse_usb(text: str) -> dict[str, Any]:
    device, options = _path_part(text)
    return {**options, "device": device}


USB = UriForm(_parse_usb, match=lambda text: bool(_DEV_RE.match(_path_part(text)[0])), positional=("device",))


class GStreamerConfig(SourceConfig):
    """A GStreamer pipeline (``gst:<pipeline>``, or any string with `` ! ``) through PyGObject: live; it
    ends in (or is given) an appsink delivering BGR."""

    live_default: ClassVar[bool] = True
    type: Literal["gstreamer"] = "gstreamer"
    pipeline: str = Field(min_length=1, description="gst-launch-1.0 syntax")
    timeout_ms: int = Field(5000, ge=1, description="No sample for this long is a stall")

    def uri(self) -> str:
        return self.pipeline


def _parse_gstreamer(text: str) -> dict[str, Any]:
    return {"pipeline": text[4:] if text.lower().startswith("gst:") else text}


GSTREAMER = UriForm(_parse_gstreamer, prefixes=("gst:",), match=lambda text: " ! " in text, positional=("pipeline",))


class SyntheticConfig(SourceConfig):
    """A test pattern (moving colour bars and a white square): needs no camera and no file. Paced at
    ``fps`` and live (drops under pressure) unless ``realtime``/``live`` say otherwise."""

    live_default: ClassVar[bool] = True
    type: Literal["synthetic"] = "synthetic"
    realtime: bool = True
    width: int = Field(640, ge=16, le=8192)
    height: int = Field(480, ge=16, le=8192)
    fps: float = Field(30.0, gt=0, lt=10_000)
    frames: int = Field(0, ge=0, description="Frames before the end (0: endless)")
    white_after: int = Field(-1, description="Frames from this index on are plain white (a scene change)")

    def uri(self) -> str:
        return "synthetic:"


SYNTHETIC = UriForm(lambda text: query_options(text)[1], prefixes=("synthetic:", "pattern:", "test:"))


class NvdecConfig(_FileSource):
    """A video file decoded on the GPU (``nvdec:clip.mp4``, PyNvVideoCodec, ``--device cuda:N``): frames
    stay in device memory; never drops."""

    type: Literal["nvdec"] = "nvdec"
    gpu: int = Field(0, ge=0, description="CUDA device ordinal of the decoder")
    matrix: Literal["bt601", "bt709"] = Field("bt601", description="YUV->RGB matrix (bt601: what OpenCV assumes)")
    prefetch: int = Field(0, ge=0, le=64, description="Frames PyNvVideoCodec decodes ahead on its own thread")


def _parse_nvdec(text: str) -> dict[str, Any]:
    path_text, options = query_options(text[6:])
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise SourceError(f"{path_text}: no such video file")
    return {**options, "path": str(path)}


NVDEC = UriForm(_parse_nvdec, prefixes=("nvdec:",), positional=("path",))
