"""The SDK's public names are a deliberate, pinned list."""

import edgefleet.sdk as sdk

EXPECTED = {
    "Agreement",
    "AnalyticsEvent",
    "EndedTrack",
    "Line",
    "RegionCounts",
    "TrackConfig",
    "Zone",
    "ZonesConfig",
    "AnalyticsConfig",
    "AnalyticsContext",
    "AnalyticsError",
    "AnalyticsStage",
    "Backend",
    "BackendConfig",
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
    "DecoderConfig",
    "DecoderError",
    "DecoderParams",
    "Detection",
    "Detections",
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
    "ModelChange",
    "ModelPackageError",
    "OnnxRuntimeConfig",
    "Pipeline",
    "PipelineConfig",
    "PipelineError",
    "PipelineStats",
    "QuantizationError",
    "Result",
    "ShadowConfig",
    "ShadowGate",
    "ShadowRun",
    "SignatureError",
    "Sink",
    "SinkConfig",
    "SinkContext",
    "SinkError",
    "Source",
    "SourceConfig",
    "SourceError",
    "SourceSpec",
    "StageStats",
    "StreamStats",
    "CameraState",
    "HealthReason",
    "SourceTimeout",
    "SwapEvent",
    "SwapReport",
    "TensorRTConfig",
    "TensorSpec",
    "TopK",
    "Transform",
    "VersionQuality",
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
    "register_analytics",
    "register_backend",
    "register_decoder",
    "register_sink",
    "register_source",
    "sign_manifest",
    "verify_package",
}


def test_all_is_pinned() -> None:
    assert set(sdk.__all__) == EXPECTED


def test_every_exported_name_exists_and_is_public() -> None:
    for name in sdk.__all__:
        obj = getattr(sdk, name)
        if name != "__version__":
            assert obj.__module__.startswith("edgefleet.sdk"), name


def test_errors_share_one_root() -> None:
    for name in sdk.__all__:
        obj = getattr(sdk, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, sdk.EdgefleetError), name
