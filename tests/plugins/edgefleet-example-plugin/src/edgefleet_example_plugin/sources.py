"""Source ``example-ramp`` (``ramp:?start=150&step=40&frames=6``): uniform grey frames getting brighter."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import parse_qsl

import numpy as np
from pydantic import Field

from edgefleet.sdk import Source, SourceConfig, SourceSpec, register_source


class RampConfig(SourceConfig):
    type: Literal["example-ramp"] = "example-ramp"
    width: int = Field(64, ge=1)
    height: int = Field(48, ge=1)
    frames: int = Field(10, ge=1)
    start: int = Field(0, ge=0, le=255)
    step: int = Field(32, ge=0)

    def uri(self) -> str:
        return f"ramp:?start={self.start}&step={self.step}&frames={self.frames}"


class RampSource(Source):
    """Frame i is grey ``min(255, start + i * step)``; ends after ``frames``."""

    def __init__(self, config: RampConfig, spec: SourceSpec) -> None:
        super().__init__(spec)
        self.config = config
        self._next = 0

    def open(self) -> None:
        self._next = 0

    def frame_shape(self) -> tuple[int, int] | None:
        return (self.config.height, self.config.width)

    def frame_count(self) -> int | None:
        return self.config.frames

    def read(self, out: np.ndarray | None) -> np.ndarray | None:
        if self._next >= self.config.frames:
            return None
        image = out if out is not None else np.empty((self.config.height, self.config.width, 3), np.uint8)
        image[:] = min(255, self.config.start + self._next * self.config.step)
        self._next += 1
        return image

    def close(self) -> None:
        pass


def _parse(text: str) -> dict[str, Any]:
    return dict(parse_qsl(text.partition("?")[2]))


def register() -> None:
    register_source("example-ramp", RampConfig, RampSource, prefixes=("ramp:",), parse=_parse)
