"""The source contract and its specification."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Source", "SourceDisconnected", "SourceSpec"]


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

    def frame_count(self) -> int | None:
        """Frames in a finite source (for progress bars), None when unknown or live."""
        return None

    @abstractmethod
    def close(self) -> None: ...
