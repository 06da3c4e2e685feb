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
        results = []
        for row in probs:
            top = np.argpartition(-row, k - 1)[:k]
            top = top[np.argsort(-row[top], kind="stable")]
            results.append(
                Decoded(
                    classifications=tuple(
                        Classification(int(c), self.ctx.label(int(c)), float(row[c]))
                        for c in top
                        if row[c] >= self.p.score_threshold
                    )
                )
            )
        return results


class RawParams(DecoderParams):
    """The raw decoder takes no parameters."""


class RawDecoder(Decoder):
    """No decoding: each result carries its rows of every output tensor in ``Result.raw``."""

    def __init__(self, ctx: DecodeContext) -> None:
        ctx.parse(RawParams)

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        return [Decoded(raw={k: np.array(v[i]) for k, v in outputs.items()}) for i in range(len(transforms))]
