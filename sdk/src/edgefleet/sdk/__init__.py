"""edgefleet SDK: streaming video-analytics pipelines on ONNX Runtime and TensorRT.

Example::

    from edgefleet.sdk import Pipeline

    with Pipeline("models/nanodet-m", ["models/media/vtest-300.mp4"], max_frames=10) as pipeline:
        for result in pipeline.results():
            print(result.stream_id, result.sequence, [(d.label, round(d.score, 2)) for d in result.detections])

Only the names below are public; everything in ``_``-modules may change without notice.
"""

from __future__ import annotations

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
    SignatureError,
    SinkError,
    SourceError,
)
from ._frames import Frame
from ._manifest import Manifest, read_manifest
from ._metrics import PipelineStats, StageStats, StreamStats
from ._package import ModelPackage, load_package
from ._pipeline import Pipeline
from ._preprocess import Transform
from ._redact import redact_uri
from ._results import Classification, Detection, Result
from ._signing import generate_signing_key, key_id, load_private_key, load_public_key, sign_manifest
from ._sinks import CallbackSink, JsonlSink, Sink, VideoSink
from ._sources import parse_source
from ._swap import SwapEvent, SwapReport

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "CallbackSink",
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
    "Transform",
    "VideoSink",
    "__version__",
    "check_archive",
    "generate_signing_key",
    "key_id",
    "load_package",
    "load_pipeline_config",
    "load_private_key",
    "load_public_key",
    "parse_source",
    "read_manifest",
    "redact_uri",
    "register_decoder",
    "sign_manifest",
]
