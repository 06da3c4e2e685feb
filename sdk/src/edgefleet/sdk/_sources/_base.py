"""The source contract and its specification."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from .._errors import SourceError
from .._frames import Allocator

__all__ = ["Source", "SourceDisconnected", "SourceSpec", "SourceUnavailable"]


class SourceUnavailable(SourceError):  # noqa: N818 - reads as what it is
    """The source is right but cannot be reached now (camera down, refused, stalled at open). Live
    sources retry with backoff; any other SourceError (a malformed URI or pipeline) fails at once."""


class SourceDisconnected(Exception):  # noqa: N818 - a signal between a source and its runner, not an error
    """A live source lost its stream (EOF, read error or stall); the runner reconnects."""


@dataclass(frozen=True)
class SourceSpec:
    """What to open and how. Built by :func:`parse_source` from a URI."""

    uri: str
    kind: str
    stream_id: str
    live: bool
    options: dict[str, str] = field(default_factory=dict)
    queue_size: int = 4
    realtime: bool = False
    loop: bool = False


class Source(ABC):
    """A stream of BGR uint8 frames.

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
