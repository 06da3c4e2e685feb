"""The sink contract: results (and, for sinks that need them, the frame pixels) go out of the pipeline."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from .._frames import Frame
from .._results import Result

__all__ = ["Sink"]


class Sink(ABC):
    """``write`` is called from the pipeline's result thread, in order per stream.

    ``frame.image`` is valid only during the call: a sink that keeps pixels copies them.
    """

    needs_pixels: bool = False
    #: set by the pipeline before ``open``: the nominal frame rate of a stream, when known
    stream_fps: Callable[[str], float | None] | None = None

    def open(self) -> None:
        """Called once before the first result."""

    @abstractmethod
    def write(self, result: Result, frame: Frame) -> None: ...

    def close(self) -> None:
        """Called once at shutdown; flushes and releases files."""
