"""Decoders, the ``decoder`` kind of the extension seam: the registry, and the built-ins registered here.

Applications add theirs with ``register_decoder``; installed distributions through the
``edgefleet.decoders`` entry-point group (see ``_registry``).
"""

from __future__ import annotations

from ._base import (
    DECODERS,
    BatchColumns,
    DecodeContext,
    Decoded,
    DecodedBatch,
    Decoder,
    DecoderConfig,
    DecoderParams,
    build_decoder,
    decoder_names,
    register_decoder,
)
from ._classification import ClassificationDecoder, ClassificationParams, RawDecoder, RawParams
from ._detection import NanoDetDecoder, NanoDetParams, YoloDecoder, YoloParams
from ._yolo_tasks import YoloPoseDecoder, YoloPoseParams, YoloSegDecoder, YoloSegParams

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

DECODERS.register("yolo", YoloParams, YoloDecoder)
DECODERS.register("yolo-seg", YoloSegParams, YoloSegDecoder)
DECODERS.register("yolo-pose", YoloPoseParams, YoloPoseDecoder)
DECODERS.register("nanodet", NanoDetParams, NanoDetDecoder)
DECODERS.register("classification", ClassificationParams, ClassificationDecoder)
DECODERS.register("raw", RawParams, RawDecoder)
