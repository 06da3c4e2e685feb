"""The decoder contract and registry: model outputs → typed detections / classifications.

A decoder is an entry of the ``decoder`` registry (``_registry``): ``type`` in the manifest's
``decoder:`` mapping selects its config (a :class:`DecoderConfig` subclass, validated when the manifest
is read) and its factory, ``factory(config, ctx) -> Decoder``, called when the model is loaded.
"""

from __future__ import annotations

import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, cast

import numpy as np
from pydantic import ConfigDict, ValidationError, create_model

from .._errors import DecoderError
from .._manifest import Manifest
from .._registry import PluginConfig, Registry
from .._results import Classification, Detection
from .._sparse import CandidateFilter
from .._transform import Transform
from .._validation import format_validation_error

__all__ = [
    "DECODERS",
    "BatchColumns",
    "DecodeContext",
    "Decoded",
    "DecodedBatch",
    "Decoder",
    "DecoderConfig",
    "DecoderParams",
    "build_decoder",
    "decoder_names",
    "register_decoder",
]


class DecoderConfig(PluginConfig):
    """Base of a decoder's config: ``type: Literal["<key>"]`` and its parameters (strict: unknown keys,
    NaN and infinity are errors). ``task`` says which manifest task the decoder serves (None: any)."""

    task: ClassVar[str | None] = None


DecoderParams = DecoderConfig
"""The name before the extension seam: a decoder's parameter schema."""

_P = TypeVar("_P", bound=DecoderConfig)


@dataclass(frozen=True, slots=True)
class Decoded:
    detections: Sequence[Detection] = ()  # a Detections (columnar) or a tuple of records
    classifications: tuple[Classification, ...] = ()
    raw: dict[str, np.ndarray] | None = None


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """A whole batch's detections as the decoder made them: frame ``i``'s are rows
    ``starts[i]:starts[i + 1]`` (its :class:`Decoded`'s ``detections`` are views of these rows)."""

    boxes: np.ndarray  # (N, 4) float32, source pixels
    scores: np.ndarray
    classes: np.ndarray
    labels: tuple[str, ...]
    index: np.ndarray  # into ``labels``
    starts: list[int]


class DecodedBatch(list[Decoded]):
    """What a built-in detection decoder returns: one :class:`Decoded` per frame, and the batch's
    columns they are views of (the analytics process is sent those as they are, not joined again)."""

    __slots__ = ("columns",)

    def __init__(self, items: list[Decoded], columns: BatchColumns) -> None:
        super().__init__(items)
        self.columns = columns


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
        if schema.model_fields["type"].is_required():  # a parameter schema with no type of its own
            data.setdefault("type", self.manifest.decoder.type)
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


DecoderFactory = Callable[[Any, DecodeContext], Decoder]
"""``factory(config, ctx)``: the validated config of its entry, and the model it decodes for."""

DECODERS: Registry[DecoderConfig] = Registry("decoder", DecoderConfig, DecoderError, group="edgefleet.decoders")


class _OpenParams(DecoderConfig):
    """The config of a decoder registered the old way, ``register_decoder(name, factory)``: any
    parameters, which its factory checks itself (``ctx.parse``)."""

    model_config = ConfigDict(extra="allow")


def register_decoder(
    key: str,
    config: type[DecoderConfig] | Callable[[DecodeContext], Decoder],
    factory: DecoderFactory | None = None,
    *,
    extra: str | None = None,
    replace: bool = False,
) -> None:
    """Make a decoder available to manifests as ``decoder: {type: <key>, ...}``.

    ``config`` is its parameter schema (a :class:`DecoderConfig` with ``type: Literal["<key>"]``),
    checked when a manifest is read; ``factory(config, ctx)`` builds the decoder when the model loads.
    ``extra``: the pip extra that installs what the decoder needs. The older form
    ``register_decoder(key, factory)``, with ``factory(ctx)`` parsing ``ctx.params`` itself, still works.

    Example::

        class CountConfig(DecoderConfig):
            type: Literal["people-count"] = "people-count"
            output: str = "count"

        class CountDecoder(Decoder):
            def __init__(self, config: CountConfig, ctx: DecodeContext) -> None:
                self.output = config.output
            def decode(self, outputs, transforms):
                return [Decoded(raw={"count": outputs[self.output][i]}) for i in range(len(transforms))]

        register_decoder("people-count", CountConfig, CountDecoder)
    """
    if factory is None:
        if isinstance(config, type) and issubclass(config, DecoderConfig):
            raise DecoderError(f"decoder {key!r}: give the factory that builds it from a {config.__name__}")
        legacy = cast(Callable[[DecodeContext], Decoder], config)

        def factory(_: Any, ctx: DecodeContext) -> Decoder:
            return legacy(ctx)

        literal: Any = typing.Literal.__getitem__(key) if isinstance(key, str) else str
        config = create_model(f"Params[{key}]", __base__=_OpenParams, type=(literal, key))
    if not (isinstance(config, type) and issubclass(config, DecoderConfig)):
        raise DecoderError(f"decoder {key!r}: config must be a DecoderConfig subclass, got {config!r}")
    DECODERS.register(key, config, factory, extra=extra, replace=replace, origin="register_decoder")


def decoder_names() -> list[str]:
    """The decoder types this installation knows (built-ins, installed plugins, registered ones)."""
    return DECODERS.keys()


def build_decoder(ctx: DecodeContext) -> Decoder:
    """Validate ``ctx.params`` (plus the threshold overrides the decoder's config has) through the decoder
    the manifest names, and build it."""
    kind = ctx.manifest.decoder.type
    entry = DECODERS.get(kind)
    if entry is None:
        raise DecoderError(
            f"{ctx.manifest.ref}: {DECODERS.describe_missing(kind)}; install the plugin that provides it, "
            "or register your own with edgefleet.sdk.register_decoder"
        )
    data = {**ctx.params, "type": kind}
    data |= {k: v for k, v in ctx.overrides.items() if k in entry.config.model_fields}
    try:
        config = DECODERS.coerce(data)
    except ValidationError as exc:
        raise DecoderError(format_validation_error(exc, ctx.manifest.ref, prefix=("decoder",))) from None
    decoder: Decoder = DECODERS.build(config, ctx)
    return decoder
