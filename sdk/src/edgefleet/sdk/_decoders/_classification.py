"""Classification (top-k) and the raw pass-through decoder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import Field

from .._errors import DecoderError
from .._preprocess import Transform
from .._results import Classification
from ._base import DecodeContext, Decoded, Decoder, DecoderParams

__all__ = ["ClassificationDecoder", "RawDecoder"]


class ClassificationParams(DecoderParams):
    top_k: int = Field(5, ge=1, le=1000)
    softmax: bool = Field(True, description="Apply softmax to logits (false when the model outputs probabilities)")
    output: str | None = None
    score_threshold: float = Field(0.0, ge=0, le=1)


class ClassificationDecoder(Decoder):
    def __init__(self, ctx: DecodeContext) -> None:
        self.ctx = ctx
        self.p = ctx.parse(ClassificationParams)
        self.output = self.p.output or ctx.output_names[0]
        if self.output not in ctx.output_names:
            raise DecoderError(f"{ctx.manifest.ref}: classification output {self.output!r} is not a model output")

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        logits = np.asarray(outputs[self.output], dtype=np.float32).reshape(len(transforms), -1)
        if self.p.softmax:
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = e / e.sum(axis=1, keepdims=True)
        else:
            probs = logits
        k = min(self.p.top_k, probs.shape[1])
        top = np.argpartition(-probs, k - 1, axis=1)[:, :k]  # the whole batch at once
        order = np.argsort(-np.take_along_axis(probs, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        scores = np.take_along_axis(probs, top, axis=1)
        label, threshold = self.ctx.label, self.p.score_threshold
        return [
            Decoded(
                classifications=tuple(
                    Classification(c, label(c), s) for c, s in zip(ids, row, strict=True) if s >= threshold
                )
            )
            for ids, row in zip(top.tolist(), scores.tolist(), strict=True)
        ]


class RawParams(DecoderParams):
    """The raw decoder takes no parameters."""


class RawDecoder(Decoder):
    """No decoding: each result carries its rows of every output tensor in ``Result.raw``."""

    def __init__(self, ctx: DecodeContext) -> None:
        ctx.parse(RawParams)

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        return [Decoded(raw={k: np.array(v[i]) for k, v in outputs.items()}) for i in range(len(transforms))]
