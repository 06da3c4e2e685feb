"""Result sinks, the ``sink`` kind of the extension seam: the registry, and the built-ins registered here
(``jsonl``, ``video``; ``CallbackSink`` is the SDK's ``on_result``).

Applications add kinds with ``register_sink``; installed distributions through the ``edgefleet.sinks``
entry-point group (the edge agent's ``events`` sink, which publishes detections over MQTT, registers
that way from the ``edgefleet-edge`` distribution).
"""

from __future__ import annotations

from ._base import SINKS, Sink, SinkConfig, SinkContext, build_sink, register_sink
from ._configs import JsonlSinkConfig, VideoSinkConfig
from ._files import CallbackSink, JsonlSink, VideoSink, draw_result

__all__ = [
    "SINKS",
    "CallbackSink",
    "JsonlSink",
    "JsonlSinkConfig",
    "Sink",
    "SinkConfig",
    "SinkContext",
    "VideoSink",
    "VideoSinkConfig",
    "build_sink",
    "draw_result",
    "register_sink",
]


def _jsonl(config: JsonlSinkConfig, ctx: SinkContext) -> Sink:
    return JsonlSink(config.path, flush_every=config.flush_every)


def _video(config: VideoSinkConfig, ctx: SinkContext) -> Sink:
    return VideoSink(config.path, fps=config.fps, multi_stream=len(ctx.stream_ids) > 1)


SINKS.register("jsonl", JsonlSinkConfig, _jsonl)
SINKS.register("video", VideoSinkConfig, _video, extra="video")
