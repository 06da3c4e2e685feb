"""edgefleet SDK: streaming video-analytics pipelines on ONNX Runtime and TensorRT.

Example::

    from edgefleet.sdk import Pipeline

    with Pipeline("models/nanodet-m", ["models/media/vtest-300.mp4"], max_frames=10) as pipeline:
        for result in pipeline.results():
            print(result.stream_id, result.sequence, [(d.label, round(d.score, 2)) for d in result.detections])

Only the names below are public; everything in ``_``-modules may change without notice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

# The names below load on first use (PEP 562), so ``import edgefleet.sdk`` (and ``edgefleet --help``)
# does not pay for pydantic, numpy and every submodule up front.
_EXPORTS: dict[str, str] = {
    "Backend": "._backends",
    "BackendError": "._errors",
    "BackendUnavailableError": "._errors",
    "CallbackSink": "._sinks",
    "BoxCandidates": "._sparse",
    "CandidateFilter": "._sparse",
    "CandidateRows": "._sparse",
    "ConsumedOutput": "._sparse",
    "Classification": "._results",
    "ConfigError": "._errors",
    "DecodeContext": "._decoders",
    "Decoded": "._decoders",
    "Decoder": "._decoders",
    "DecoderError": "._errors",
    "DecoderParams": "._decoders",
    "Detection": "._results",
    "EdgefleetError": "._errors",
    "Frame": "._frames",
    "Keypoint": "._results",
    "Mask": "._results",
    "InputBuffer": "._backends",
    "IntegrityError": "._errors",
    "JsonlSink": "._sinks",
    "Manifest": "._manifest",
    "ManifestError": "._errors",
    "ModelMismatchError": "._errors",
    "ModelPackage": "._package",
    "ModelPackageError": "._errors",
    "OnnxRuntimeConfig": "._config",
    "Pipeline": "._pipeline",
    "PipelineConfig": "._config",
    "PipelineError": "._errors",
    "PipelineStats": "._metrics",
    "Result": "._results",
    "SignatureError": "._errors",
    "Sink": "._sinks",
    "SinkConfig": "._config",
    "SinkError": "._errors",
    "SourceError": "._errors",
    "StageStats": "._metrics",
    "StreamStats": "._metrics",
    "SwapEvent": "._swap",
    "SwapReport": "._swap",
    "TensorRTConfig": "._config",
    "TensorSpec": "._backends",
    "TopK": "._sparse",
    "Transform": "._preprocess",
    "VideoSink": "._sinks",
    "check_archive": "._archive",
    "generate_signing_key": "._signing",
    "key_id": "._signing",
    "load_package": "._package",
    "load_pipeline_config": "._config",
    "load_private_key": "._signing",
    "load_public_key": "._signing",
    "init_package": "._packaging",
    "pack_package": "._packaging",
    "bump_package": "._packaging",
    "verify_package": "._packaging",
    "quantize_package": "._packaging",
    "QuantizationError": "._errors",
    "parse_source": "._sources",
    "read_manifest": "._manifest",
    "redact_uri": "._redact",
    "register_decoder": "._decoders",
    "sign_manifest": "._signing",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from ._archive import check_archive
    from ._backends import Backend, InputBuffer, TensorSpec
    from ._config import OnnxRuntimeConfig, PipelineConfig, SinkConfig, TensorRTConfig, load_pipeline_config
    from ._decoders import DecodeContext, Decoded, Decoder, DecoderParams, register_decoder
    from ._errors import (
        BackendError,
        BackendUnavailableError,
        ConfigError,
        DecoderError,
        EdgefleetError,
        IntegrityError,
        ManifestError,
        ModelMismatchError,
        ModelPackageError,
        PipelineError,
        QuantizationError,
        SignatureError,
        SinkError,
        SourceError,
    )
    from ._frames import Frame
    from ._manifest import Manifest, read_manifest
    from ._metrics import PipelineStats, StageStats, StreamStats
    from ._package import ModelPackage, load_package
    from ._packaging import bump_package, init_package, pack_package, quantize_package, verify_package
    from ._pipeline import Pipeline
    from ._preprocess import Transform
    from ._redact import redact_uri
    from ._results import Classification, Detection, Keypoint, Mask, Result
    from ._signing import generate_signing_key, key_id, load_private_key, load_public_key, sign_manifest
    from ._sinks import CallbackSink, JsonlSink, Sink, VideoSink
    from ._sources import parse_source
    from ._sparse import BoxCandidates, CandidateFilter, CandidateRows, ConsumedOutput, TopK
    from ._swap import SwapEvent, SwapReport

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "CallbackSink",
    "BoxCandidates",
    "CandidateFilter",
    "CandidateRows",
    "ConsumedOutput",
    "Classification",
    "ConfigError",
    "DecodeContext",
    "Decoded",
    "Decoder",
    "DecoderError",
    "DecoderParams",
    "Detection",
    "EdgefleetError",
    "Frame",
    "InputBuffer",
    "Keypoint",
    "Mask",
    "IntegrityError",
    "JsonlSink",
    "Manifest",
    "ManifestError",
    "ModelMismatchError",
    "ModelPackage",
    "ModelPackageError",
    "OnnxRuntimeConfig",
    "Pipeline",
    "PipelineConfig",
    "PipelineError",
    "PipelineStats",
    "QuantizationError",
    "Result",
    "SignatureError",
    "Sink",
    "SinkConfig",
    "SinkError",
    "SourceError",
    "StageStats",
    "StreamStats",
    "SwapEvent",
    "SwapReport",
    "TensorRTConfig",
    "TensorSpec",
    "TopK",
    "Transform",
    "VideoSink",
    "__version__",
    "bump_package",
    "check_archive",
    "generate_signing_key",
    "init_package",
    "key_id",
    "load_package",
    "load_pipeline_config",
    "load_private_key",
    "load_public_key",
    "pack_package",
    "parse_source",
    "quantize_package",
    "read_manifest",
    "redact_uri",
    "register_decoder",
    "sign_manifest",
    "verify_package",
]
