"""Decoders: built-ins register themselves here; applications add theirs with ``register_decoder``."""

from __future__ import annotations

from ._base import (
    DecodeContext,
    Decoded,
    Decoder,
    DecoderParams,
    build_decoder,
    decoder_names,
    register_decoder,
)
from ._classification import ClassificationDecoder, RawDecoder
from ._detection import NanoDetDecoder, YoloDecoder
from ._yolo_tasks import YoloPoseDecoder, YoloSegDecoder

__all__ = [
    "DecodeContext",
    "Decoded",
    "Decoder",
    "DecoderParams",
    "build_decoder",
    "decoder_names",
    "register_decoder",
]

register_decoder("yolo", YoloDecoder)
register_decoder("yolo-seg", YoloSegDecoder)
register_decoder("yolo-pose", YoloPoseDecoder)
register_decoder("nanodet", NanoDetDecoder)
register_decoder("classification", ClassificationDecoder)
register_decoder("raw", RawDecoder)
