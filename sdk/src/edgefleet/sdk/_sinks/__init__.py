"""Result sinks."""

from ._base import Sink
from ._files import CallbackSink, JsonlSink, VideoSink, draw_result

__all__ = ["CallbackSink", "JsonlSink", "Sink", "VideoSink", "draw_result"]
