"""The built-in sinks' configs (``sinks: [{type: jsonl, path: out.jsonl}, {type: video, path: out.mp4}]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ._base import SinkConfig

__all__ = ["JsonlSinkConfig", "VideoSinkConfig"]


class JsonlSinkConfig(SinkConfig):
    """One JSON object per result per line (``Result.to_dict()``)."""

    type: Literal["jsonl"] = "jsonl"
    path: Path = Field(description="The JSON lines file (replaced)")
    flush_every: int = Field(64, ge=1, description="Lines between flushes")


class VideoSinkConfig(SinkConfig):
    """Annotated H.264 MP4; with several streams one file per stream (``out.mp4`` -> ``out-<stream>.mp4``)."""

    type: Literal["video"] = "video"
    path: Path = Field(description="The .mp4/.mkv/.mov file")
    fps: float | None = Field(None, gt=0, le=1000, description="Frame rate written (default: the stream's)")
