"""Classification (top-k) and the raw pass-through decoder.

On a GPU backend the classification decoder asks for each row's top k to be found on the device
(:class:`~edgefleet.sdk._sparse.TopK`): k values and the row's log-sum-exp come back instead of every
logit, and the host's part is a few small arrays (no pass over the batch's (N, C) scores, which would
also release and re-take the GIL several times a batch while the sources' threads compete for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from .._errors import DecoderError
from .._results import Classification
from .._sparse import CandidateFilter, TopK
from .._transform import Transform
from ._base import DecodeContext, Decoded, Decoder, DecoderConfig

__all__ = ["ClassificationDecoder", "ClassificationParams", "RawDecoder", "RawParams"]


class ClassificationParams(DecoderConfig):
    """``decoder: {type: classification, ...}``: the k best classes of each frame."""

    task: ClassVar[str | None] = "classification"
    type: Literal["classification"] = "classification"
    top_k: int = Field(5, ge=1, le=1000)
    softmax: bool = Field(True, description="Apply softmax to logits (false when the model outputs probabilities)")
    output: str | None = None
    score_threshold: float = Field(0.0, ge=0, le=1)


class ClassificationDecoder(Decoder):
    def __init__(self, config: ClassificationParams, ctx: DecodeContext) -> None:
        self.ctx = ctx
        self.p = config
        self.output = self.p.output or ctx.output_names[0]
        if self.output not in ctx.output_names:
            raise DecoderError(f"{ctx.manifest.ref}: classification output {self.output!r} is not a model output")

    def candidate_filters(self) -> list[CandidateFilter]:
        """The top k of each row, found on the GPU."""
        return [CandidateFilter(self.output, self.p.score_threshold, "top_k", k=self.p.top_k)]

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        raw = outputs[self.output]
        if isinstance(raw, TopK):  # found on the GPU: largest first, with each row's log-sum-exp
            if raw.values.shape != (len(transforms), self.p.top_k):
                raise DecoderError(f"top k of shape {raw.values.shape}, expected ({len(transforms)}, {self.p.top_k})")
            scores = np.exp(raw.values - raw.lse[:, None]) if self.p.softmax else raw.values
            return self._records(raw.index, scores)
        logits = np.asarray(raw, dtype=np.float32).reshape(len(transforms), -1)
        if self.p.softmax:
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = e / e.sum(axis=1, keepdims=True)
        else:
            probs = logits
        k = min(self.p.top_k, probs.shape[1])
        top = np.argpartition(-probs, k - 1, axis=1)[:, :k]  # the whole batch at once
        order = np.argsort(-np.take_along_axis(probs, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        return self._records(top, np.take_along_axis(probs, top, axis=1))

    def _records(self, top: np.ndarray, scores: np.ndarray) -> list[Decoded]:
        label, threshold = self.ctx.label, self.p.score_threshold
        return [
            Decoded(
                classifications=tuple(
                    Classification(c, label(c), s) for c, s in zip(ids, row, strict=True) if s >= threshold
                )
            )
            for ids, row in zip(top.tolist(), scores.tolist(), strict=True)
        ]


class RawParams(DecoderConfig):
    """``decoder: {type: raw}`` takes no parameters."""

    type: Literal["raw"] = "raw"


class RawDecoder(Decoder):
    """No decoding: each result carries its rows of every output tensor in ``Result.raw``."""

    def __init__(self, config: RawParams, ctx: DecodeContext) -> None:
        self.config = config

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        return [Decoded(raw={k: np.array(v[i]) for k, v in outputs.items()}) for i in range(len(transforms))]
