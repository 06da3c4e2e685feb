"""The source contract, the base of every source kind's config, and the resolved spec a source is built from."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from pydantic import Field

from .._errors import SourceError
from .._frames import Allocator
from .._health import HealthReason
from .._registry import PluginConfig

__all__ = ["Source", "SourceConfig", "SourceDisconnected", "SourceSpec", "SourceUnavailable"]

STREAM_ID = r"^[A-Za-z0-9_.-]{1,64}$"


class SourceConfig(PluginConfig):
    """Base of a source kind's config: ``type: Literal["<key>"]``, the kind's own fields, and the options
    every source takes. ``live_default``: whether the kind is live (drops the oldest frame under pressure,
    reconnects) unless ``live`` says otherwise."""

    live_default: ClassVar[bool] = False
    id: str | None = Field(None, pattern=STREAM_ID, description="Stream id (default s<index>)")
    queue: int = Field(4, ge=1, le=1024, description="Frames buffered for this stream")
    live: bool | None = Field(None, description="Drop the oldest frame under pressure (default: the kind's)")
    realtime: bool = Field(False, description="Pace a file at its frame rate")
    loop: bool = Field(False, description="Start a finite source again at its end")
    stall_s: float = Field(
        5.0, gt=0, le=3600, description="Seconds without a frame before a live stream reads as stalled"
    )

    def uri(self) -> str:
        """What the source reads, for logs and errors (credentials are redacted where it is shown)."""
        return f"{self.type}:"

    def reads(self) -> Path | None:
        """The file or folder this source reads, which no sink may write over (None: none)."""
        return None


class SourceUnavailable(SourceError):  # noqa: N818 - reads as what it is
    """The source is right but cannot be reached now (camera down, refused, stalled at open). Live
    sources retry with backoff; any other SourceError (a malformed URI or pipeline) fails at once.
    ``reason``: why, from the fixed set of :class:`~edgefleet.sdk.HealthReason` (None: not known)."""

    def __init__(self, message: str, *, reason: HealthReason | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class SourceDisconnected(Exception):  # noqa: N818 - a signal between a source and its runner, not an error
    """A live source lost its stream (EOF, read error or stall); the runner reconnects. ``reason``: why
    (end of stream, timeout, decode error), None when not known."""

    def __init__(self, message: str, *, reason: HealthReason | None = None) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class SourceSpec:
    """What to open and how: one stream's validated config with its stream id and live-ness resolved.
    Built by :func:`~edgefleet.sdk.parse_source` from a URI, or from a config mapping."""

    uri: str
    kind: str
    stream_id: str
    live: bool
    queue_size: int = 4
    realtime: bool = False
    loop: bool = False
    config: SourceConfig | None = None


class Source(ABC):
    """A stream of BGR uint8 frames, built from a :class:`SourceSpec` (its kind's config in ``spec.config``).

    ``open`` raises :class:`~edgefleet.sdk.SourceError` for a bad URI or an unreachable file;
    ``read`` decodes the next frame into ``out`` when it fits (zero copies), returns None at the end of a
    finite stream, and raises :class:`SourceDisconnected` when a live stream breaks.
    """

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        #: copies of pixel data the source itself made (e.g. out of a GStreamer buffer); the runner
        #: adds them to the pipeline's copy counter.
        self.copies = 0

    #: the CopyCounter kind of the copies counted in ``copies`` (a GPU decoder's are device_to_device)
    copy_kind = "host_to_host"

    def frame_allocator(self, default: Allocator) -> Allocator:
        """The allocator of this source's frame pool: ``default`` (host or pinned slots) unless the
        source decodes somewhere else (the NVDEC source allocates device slots)."""
        return default

    @property
    def stream_id(self) -> str:
        return self.spec.stream_id

    @property
    def live(self) -> bool:
        return self.spec.live

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def frame_shape(self) -> tuple[int, int] | None:
        """(height, width) of the frames to come, when known after ``open``."""

    @abstractmethod
    def read(self, out: np.ndarray | None) -> np.ndarray | None: ...

    def nominal_fps(self) -> float | None:
        return None

    #: inputs the source passed over so far (an image folder's unreadable files); the runner reports them
    skipped = 0

    def frame_source(self) -> str | None:
        """What the frame just read came from, when it differs from frame to frame (an image folder: its
        file); None means the source's own URI (the runner redacts it once)."""
        return None

    def frame_count(self) -> int | None:
        """Frames in a finite source (for progress bars), None when unknown or live."""
        return None

    @abstractmethod
    def close(self) -> None: ...
