"""The decoder contract and registry: model outputs → typed detections / classifications."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from .._errors import DecoderError
from .._manifest import Manifest, format_validation_error
from .._preprocess import Transform
from .._results import Classification, Detection
from .._sparse import CandidateFilter

__all__ = [
    "DecodeContext",
    "Decoded",
    "Decoder",
    "DecoderParams",
    "build_decoder",
    "decoder_names",
    "register_decoder",
]


class DecoderParams(BaseModel):
    """Base for a decoder's parameter schema (strict: unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


_P = TypeVar("_P", bound=DecoderParams)


@dataclass(frozen=True, slots=True)
class Decoded:
    detections: tuple[Detection, ...] = ()
    classifications: tuple[Classification, ...] = ()
    raw: dict[str, np.ndarray] | None = None


@dataclass(frozen=True)
class DecodeContext:
    """What a decoder factory gets: its parameters, the manifest, labels and the real outputs: their
    names and, where known, their shapes (``output_shapes``, batch dimension -1: from the graph, or from
    a dry run where the graph leaves a dimension symbolic)."""

    params: dict[str, Any]
    manifest: Manifest
    labels: tuple[str, ...]
    output_names: tuple[str, ...]
    overrides: dict[str, float] = field(default_factory=dict)
    output_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def output_shape(self, name: str) -> tuple[int, ...] | None:
        """The best known shape of output ``name`` (-1: not known before a frame runs): the model's real
        dimensions where known, the manifest's elsewhere; None when neither has it."""
        declared = next((o.shape for o in self.manifest.outputs if o.name == name), None)
        real = self.output_shapes.get(name)
        if real is None or declared is None or len(real) != len(declared):
            return real if real is not None else declared
        return tuple(r if r > 0 else d for r, d in zip(real, declared, strict=True))

    def parse(self, schema: type[_P]) -> _P:
        """Validate ``params`` (plus threshold overrides the schema knows) against ``schema``."""
        data = dict(self.params)
        for key, value in self.overrides.items():
            if key in schema.model_fields:
                data[key] = value
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            raise DecoderError(format_validation_error(exc, f"{self.manifest.ref} decoder")) from None

    def label(self, class_id: int) -> str:
        return self.labels[class_id] if 0 <= class_id < len(self.labels) else str(class_id)


class Decoder(ABC):
    """Turns one batch of model outputs into one :class:`Decoded` per frame."""

    @abstractmethod
    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        """``outputs`` hold exactly ``len(transforms)`` rows; boxes must come back in source pixels."""

    def candidate_filters(self) -> list[CandidateFilter]:
        """Outputs a GPU backend may cut down on the device to what ``decode`` reads (``decode`` then also
        gets :class:`~edgefleet.sdk._sparse.CandidateRows`, :class:`~edgefleet.sdk._sparse.TopK` or
        :class:`~edgefleet.sdk._sparse.BoxCandidates` for them). None by default."""
        return []


DecoderFactory = Callable[[DecodeContext], Decoder]
_registry: dict[str, DecoderFactory] = {}
_lock = threading.Lock()


def register_decoder(name: str, factory: DecoderFactory, *, replace: bool = False) -> None:
    """Make a decoder available to manifests as ``decoder: {type: <name>, ...}``.

    Example::

        class CountDecoder(Decoder):
            def __init__(self, ctx: DecodeContext) -> None: ...
            def decode(self, outputs, transforms):
                return [Decoded(raw={"count": outputs["count"][i]}) for i in range(len(transforms))]

        register_decoder("people-count", CountDecoder)
    """
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise DecoderError(f"decoder name {name!r} must be alphanumeric (with - or _)")
    with _lock:
        if name in _registry and not replace:
            raise DecoderError(f"a decoder named {name!r} is already registered (pass replace=True)")
        _registry[name] = factory


def decoder_names() -> list[str]:
    with _lock:
        return sorted(_registry)


def build_decoder(ctx: DecodeContext) -> Decoder:
    kind = ctx.manifest.decoder.type
    with _lock:
        factory = _registry.get(kind)
    if factory is None:
        raise DecoderError(
            f"{ctx.manifest.ref}: unknown decoder {kind!r} (known: {', '.join(decoder_names())}; "
            "register your own with edgefleet.sdk.register_decoder)"
        )
    return factory(ctx)
