from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelRef(_message.Message):
    __slots__ = ("name", "version", "sha256", "size", "variant")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    sha256: str
    size: int
    variant: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ..., variant: _Optional[str] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("arch", "os", "os_release", "distro", "python", "agent_version", "gpu", "soc", "jetpack", "l4t", "cuda", "tensorrt", "ort_providers", "cpu_count", "memory_mb")
    ARCH_FIELD_NUMBER: _ClassVar[int]
    OS_FIELD_NUMBER: _ClassVar[int]
    OS_RELEASE_FIELD_NUMBER: _ClassVar[int]
    DISTRO_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    SOC_FIELD_NUMBER: _ClassVar[int]
    JETPACK_FIELD_NUMBER: _ClassVar[int]
    L4T_FIELD_NUMBER: _ClassVar[int]
    CUDA_FIELD_NUMBER: _ClassVar[int]
    TENSORRT_FIELD_NUMBER: _ClassVar[int]
    ORT_PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    CPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    arch: str
    os: str
    os_release: str
    distro: str
    python: str
    agent_version: str
    gpu: str
    soc: str
    jetpack: str
    l4t: str
    cuda: str
    tensorrt: str
    ort_providers: _containers.RepeatedScalarFieldContainer[str]
    cpu_count: int
    memory_mb: int
    def __init__(self, arch: _Optional[str] = ..., os: _Optional[str] = ..., os_release: _Optional[str] = ..., distro: _Optional[str] = ..., python: _Optional[str] = ..., agent_version: _Optional[str] = ..., gpu: _Optional[str] = ..., soc: _Optional[str] = ..., jetpack: _Optional[str] = ..., l4t: _Optional[str] = ..., cuda: _Optional[str] = ..., tensorrt: _Optional[str] = ..., ort_providers: _Optional[_Iterable[str]] = ..., cpu_count: _Optional[int] = ..., memory_mb: _Optional[int] = ...) -> None: ...

class Health(_message.Message):
    __slots__ = ("fps", "latency_p50_ms", "latency_p95_ms", "frames_in", "results", "dropped", "errors", "healthy", "detail")
    FPS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P50_MS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P95_MS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_IN_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    fps: float
    latency_p50_ms: float
    latency_p95_ms: float
    frames_in: int
    results: int
    dropped: int
    errors: int
    healthy: bool
    detail: str
    def __init__(self, fps: _Optional[float] = ..., latency_p50_ms: _Optional[float] = ..., latency_p95_ms: _Optional[float] = ..., frames_in: _Optional[int] = ..., results: _Optional[int] = ..., dropped: _Optional[int] = ..., errors: _Optional[int] = ..., healthy: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class PipelineStatus(_message.Message):
    __slots__ = ("name", "model_ref", "model_sha256", "state", "health", "previous_ref", "last_good_ref", "last_good_sha256", "spec_ref", "quality", "cameras")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_REF_FIELD_NUMBER: _ClassVar[int]
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_REF_FIELD_NUMBER: _ClassVar[int]
    LAST_GOOD_REF_FIELD_NUMBER: _ClassVar[int]
    LAST_GOOD_SHA256_FIELD_NUMBER: _ClassVar[int]
    SPEC_REF_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    CAMERAS_FIELD_NUMBER: _ClassVar[int]
    name: str
    model_ref: str
    model_sha256: str
    state: str
    health: Health
    previous_ref: str
    last_good_ref: str
    last_good_sha256: str
    spec_ref: str
    quality: _containers.RepeatedCompositeFieldContainer[ModelQuality]
    cameras: _containers.RepeatedCompositeFieldContainer[CameraHealth]
    def __init__(self, name: _Optional[str] = ..., model_ref: _Optional[str] = ..., model_sha256: _Optional[str] = ..., state: _Optional[str] = ..., health: _Optional[_Union[Health, _Mapping]] = ..., previous_ref: _Optional[str] = ..., last_good_ref: _Optional[str] = ..., last_good_sha256: _Optional[str] = ..., spec_ref: _Optional[str] = ..., quality: _Optional[_Iterable[_Union[ModelQuality, _Mapping]]] = ..., cameras: _Optional[_Iterable[_Union[CameraHealth, _Mapping]]] = ...) -> None: ...

class CameraHealth(_message.Message):
    __slots__ = ("stream_id", "state", "reason", "state_seconds", "live", "detail")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    stream_id: str
    state: str
    reason: str
    state_seconds: float
    live: bool
    detail: str
    def __init__(self, stream_id: _Optional[str] = ..., state: _Optional[str] = ..., reason: _Optional[str] = ..., state_seconds: _Optional[float] = ..., live: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class ModelQuality(_message.Message):
    __slots__ = ("model_ref", "frames", "detections", "detections_per_frame", "empty_frame_ratio", "class_mix", "confidence_p10", "confidence_p50", "confidence_p90", "new_tracks_per_frame", "ended_tracks_per_frame")
    class ClassMixEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    MODEL_REF_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    DETECTIONS_FIELD_NUMBER: _ClassVar[int]
    DETECTIONS_PER_FRAME_FIELD_NUMBER: _ClassVar[int]
    EMPTY_FRAME_RATIO_FIELD_NUMBER: _ClassVar[int]
    CLASS_MIX_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_P10_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_P50_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_P90_FIELD_NUMBER: _ClassVar[int]
    NEW_TRACKS_PER_FRAME_FIELD_NUMBER: _ClassVar[int]
    ENDED_TRACKS_PER_FRAME_FIELD_NUMBER: _ClassVar[int]
    model_ref: str
    frames: int
    detections: int
    detections_per_frame: float
    empty_frame_ratio: float
    class_mix: _containers.ScalarMap[str, float]
    confidence_p10: float
    confidence_p50: float
    confidence_p90: float
    new_tracks_per_frame: float
    ended_tracks_per_frame: float
    def __init__(self, model_ref: _Optional[str] = ..., frames: _Optional[int] = ..., detections: _Optional[int] = ..., detections_per_frame: _Optional[float] = ..., empty_frame_ratio: _Optional[float] = ..., class_mix: _Optional[_Mapping[str, float]] = ..., confidence_p10: _Optional[float] = ..., confidence_p50: _Optional[float] = ..., confidence_p90: _Optional[float] = ..., new_tracks_per_frame: _Optional[float] = ..., ended_tracks_per_frame: _Optional[float] = ...) -> None: ...
