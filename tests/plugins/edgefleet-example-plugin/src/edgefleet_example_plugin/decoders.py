"""Decoder ``example-mean``: each frame's mean output value, as a ``dark`` or ``bright`` classification."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from edgefleet.sdk import Classification, DecodeContext, Decoded, Decoder, DecoderConfig, register_decoder


class MeanConfig(DecoderConfig):
    type: Literal["example-mean"] = "example-mean"
    output: str | None = Field(None, description="Output tensor (default: the first)")
    threshold: float = Field(0.5, description="Mean at or above which a frame is the second label")
    labels: tuple[str, str] = ("dark", "bright")


class MeanDecoder(Decoder):
    def __init__(self, config: MeanConfig, ctx: DecodeContext) -> None:
        self.config = config
        self.output = config.output or ctx.output_names[0]

    def decode(self, outputs: Mapping[str, Any], transforms: Sequence[Any]) -> list[Decoded]:
        means = np.asarray(outputs[self.output], dtype=np.float64).reshape(len(transforms), -1).mean(axis=1)
        dark, bright = self.config.labels
        return [
            Decoded(
                classifications=(
                    Classification(
                        int(m >= self.config.threshold), bright if m >= self.config.threshold else dark, float(m)
                    ),
                )
            )
            for m in means
        ]


def register() -> None:
    register_decoder("example-mean", MeanConfig, MeanDecoder)
