from edgefleet.proto.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PushPipelineSpecRequest(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: str
    def __init__(self, document: _Optional[str] = ...) -> None: ...

class PipelineSpecInfo(_message.Message):
    __slots__ = ("name", "version", "sha256", "description", "pushed_at", "document", "pipelines", "streams")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PUSHED_AT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    sha256: str
    description: str
    pushed_at: float
    document: str
    pipelines: _containers.RepeatedScalarFieldContainer[str]
    streams: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., sha256: _Optional[str] = ..., description: _Optional[str] = ..., pushed_at: _Optional[float] = ..., document: _Optional[str] = ..., pipelines: _Optional[_Iterable[str]] = ..., streams: _Optional[int] = ...) -> None: ...

class PushPipelineSpecResponse(_message.Message):
    __slots__ = ("spec", "created")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    spec: PipelineSpecInfo
    created: bool
    def __init__(self, spec: _Optional[_Union[PipelineSpecInfo, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class ListPipelineSpecsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListPipelineSpecsResponse(_message.Message):
    __slots__ = ("specs",)
    SPECS_FIELD_NUMBER: _ClassVar[int]
    specs: _containers.RepeatedCompositeFieldContainer[PipelineSpecInfo]
    def __init__(self, specs: _Optional[_Iterable[_Union[PipelineSpecInfo, _Mapping]]] = ...) -> None: ...

class GetPipelineSpecRequest(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class PutSecretRequest(_message.Message):
    __slots__ = ("device_id", "name", "sealed")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    name: str
    sealed: bytes
    def __init__(self, device_id: _Optional[str] = ..., name: _Optional[str] = ..., sealed: _Optional[bytes] = ...) -> None: ...

class SecretInfo(_message.Message):
    __slots__ = ("device_id", "name", "sha256", "updated_at")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    name: str
    sha256: str
    updated_at: float
    def __init__(self, device_id: _Optional[str] = ..., name: _Optional[str] = ..., sha256: _Optional[str] = ..., updated_at: _Optional[float] = ...) -> None: ...

class ListSecretsRequest(_message.Message):
    __slots__ = ("device_id",)
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    def __init__(self, device_id: _Optional[str] = ...) -> None: ...

class ListSecretsResponse(_message.Message):
    __slots__ = ("secrets",)
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    secrets: _containers.RepeatedCompositeFieldContainer[SecretInfo]
    def __init__(self, secrets: _Optional[_Iterable[_Union[SecretInfo, _Mapping]]] = ...) -> None: ...

class PushModelRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: PushHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[PushHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class PushHeader(_message.Message):
    __slots__ = ("size", "sha256", "target", "variant")
    class TargetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    size: int
    sha256: str
    target: _containers.ScalarMap[str, str]
    variant: str
    def __init__(self, size: _Optional[int] = ..., sha256: _Optional[str] = ..., target: _Optional[_Mapping[str, str]] = ..., variant: _Optional[str] = ...) -> None: ...

class ModelVariant(_message.Message):
    __slots__ = ("variant", "sha256", "size", "target")
    class TargetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    variant: str
    sha256: str
    size: int
    target: _containers.ScalarMap[str, str]
    def __init__(self, variant: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ..., target: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PushModelResponse(_message.Message):
    __slots__ = ("model", "created")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    model: Model
    created: bool
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("name", "version", "sha256", "size", "task", "signed_by", "pushed_at", "description", "variants", "portable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    SIGNED_BY_FIELD_NUMBER: _ClassVar[int]
    PUSHED_AT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    PORTABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    sha256: str
    size: int
    task: str
    signed_by: str
    pushed_at: float
    description: str
    variants: _containers.RepeatedCompositeFieldContainer[ModelVariant]
    portable: bool
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ..., task: _Optional[str] = ..., signed_by: _Optional[str] = ..., pushed_at: _Optional[float] = ..., description: _Optional[str] = ..., variants: _Optional[_Iterable[_Union[ModelVariant, _Mapping]]] = ..., portable: _Optional[bool] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ...) -> None: ...

class DesiredModel(_message.Message):
    __slots__ = ("model_name", "model_ref", "sha256", "command_id", "rollout_id", "state", "message", "attempt", "last_good")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_REF_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LAST_GOOD_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    model_ref: str
    sha256: str
    command_id: str
    rollout_id: str
    state: str
    message: str
    attempt: int
    last_good: bool
    def __init__(self, model_name: _Optional[str] = ..., model_ref: _Optional[str] = ..., sha256: _Optional[str] = ..., command_id: _Optional[str] = ..., rollout_id: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., attempt: _Optional[int] = ..., last_good: _Optional[bool] = ...) -> None: ...

class Device(_message.Message):
    __slots__ = ("device_id", "labels", "capabilities", "online", "first_seen", "last_seen", "pipelines", "desired", "health", "last_event", "telemetry", "sealing_key", "health_state", "health_detail")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    ONLINE_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    DESIRED_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_FIELD_NUMBER: _ClassVar[int]
    TELEMETRY_FIELD_NUMBER: _ClassVar[int]
    SEALING_KEY_FIELD_NUMBER: _ClassVar[int]
    HEALTH_STATE_FIELD_NUMBER: _ClassVar[int]
    HEALTH_DETAIL_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    labels: _containers.ScalarMap[str, str]
    capabilities: _common_pb2.Capabilities
    online: bool
    first_seen: float
    last_seen: float
    pipelines: _containers.RepeatedCompositeFieldContainer[_common_pb2.PipelineStatus]
    desired: _containers.RepeatedCompositeFieldContainer[DesiredModel]
    health: _common_pb2.Health
    last_event: str
    telemetry: DeviceTelemetry
    sealing_key: str
    health_state: str
    health_detail: str
    def __init__(self, device_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., capabilities: _Optional[_Union[_common_pb2.Capabilities, _Mapping]] = ..., online: _Optional[bool] = ..., first_seen: _Optional[float] = ..., last_seen: _Optional[float] = ..., pipelines: _Optional[_Iterable[_Union[_common_pb2.PipelineStatus, _Mapping]]] = ..., desired: _Optional[_Iterable[_Union[DesiredModel, _Mapping]]] = ..., health: _Optional[_Union[_common_pb2.Health, _Mapping]] = ..., last_event: _Optional[str] = ..., telemetry: _Optional[_Union[DeviceTelemetry, _Mapping]] = ..., sealing_key: _Optional[str] = ..., health_state: _Optional[str] = ..., health_detail: _Optional[str] = ...) -> None: ...

class DeviceTelemetry(_message.Message):
    __slots__ = ("online", "fps", "latency_p95_ms", "last_seen", "models", "fleet", "agent_version", "rejected", "acknowledged_seq", "cameras")
    class RejectedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ONLINE_FIELD_NUMBER: _ClassVar[int]
    FPS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P95_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_SEQ_FIELD_NUMBER: _ClassVar[int]
    CAMERAS_FIELD_NUMBER: _ClassVar[int]
    online: bool
    fps: float
    latency_p95_ms: float
    last_seen: float
    models: _containers.RepeatedScalarFieldContainer[str]
    fleet: str
    agent_version: str
    rejected: _containers.ScalarMap[str, int]
    acknowledged_seq: int
    cameras: _containers.RepeatedCompositeFieldContainer[_common_pb2.CameraHealth]
    def __init__(self, online: _Optional[bool] = ..., fps: _Optional[float] = ..., latency_p95_ms: _Optional[float] = ..., last_seen: _Optional[float] = ..., models: _Optional[_Iterable[str]] = ..., fleet: _Optional[str] = ..., agent_version: _Optional[str] = ..., rejected: _Optional[_Mapping[str, int]] = ..., acknowledged_seq: _Optional[int] = ..., cameras: _Optional[_Iterable[_Union[_common_pb2.CameraHealth, _Mapping]]] = ...) -> None: ...

class ListDevicesRequest(_message.Message):
    __slots__ = ("selector",)
    class SelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    selector: _containers.ScalarMap[str, str]
    def __init__(self, selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListDevicesResponse(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    def __init__(self, devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ...) -> None: ...

class GetDeviceRequest(_message.Message):
    __slots__ = ("device_id",)
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    def __init__(self, device_id: _Optional[str] = ...) -> None: ...

class SetLabelsRequest(_message.Message):
    __slots__ = ("device_id", "set", "remove")
    class SetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    set: _containers.ScalarMap[str, str]
    remove: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, device_id: _Optional[str] = ..., set: _Optional[_Mapping[str, str]] = ..., remove: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateRolloutRequest(_message.Message):
    __slots__ = ("model_ref", "selector", "waves", "health_window_s", "max_failure_ratio", "min_fps", "max_latency_ms", "request_id", "min_shadow_f1", "max_class_mix_shift", "max_detection_rate_change", "shadow_sample_rate", "shadow_min_frames", "shadow_max_s", "pipeline_ref", "cameras_may_be_down", "camera_grace_s", "shadow_phase")
    class SelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_REF_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    WAVES_FIELD_NUMBER: _ClassVar[int]
    HEALTH_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    MAX_FAILURE_RATIO_FIELD_NUMBER: _ClassVar[int]
    MIN_FPS_FIELD_NUMBER: _ClassVar[int]
    MAX_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_SHADOW_F1_FIELD_NUMBER: _ClassVar[int]
    MAX_CLASS_MIX_SHIFT_FIELD_NUMBER: _ClassVar[int]
    MAX_DETECTION_RATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    SHADOW_SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    SHADOW_MIN_FRAMES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_MAX_S_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_REF_FIELD_NUMBER: _ClassVar[int]
    CAMERAS_MAY_BE_DOWN_FIELD_NUMBER: _ClassVar[int]
    CAMERA_GRACE_S_FIELD_NUMBER: _ClassVar[int]
    SHADOW_PHASE_FIELD_NUMBER: _ClassVar[int]
    model_ref: str
    selector: _containers.ScalarMap[str, str]
    waves: _containers.RepeatedScalarFieldContainer[str]
    health_window_s: float
    max_failure_ratio: float
    min_fps: float
    max_latency_ms: float
    request_id: str
    min_shadow_f1: float
    max_class_mix_shift: float
    max_detection_rate_change: float
    shadow_sample_rate: float
    shadow_min_frames: int
    shadow_max_s: float
    pipeline_ref: str
    cameras_may_be_down: bool
    camera_grace_s: float
    shadow_phase: str
    def __init__(self, model_ref: _Optional[str] = ..., selector: _Optional[_Mapping[str, str]] = ..., waves: _Optional[_Iterable[str]] = ..., health_window_s: _Optional[float] = ..., max_failure_ratio: _Optional[float] = ..., min_fps: _Optional[float] = ..., max_latency_ms: _Optional[float] = ..., request_id: _Optional[str] = ..., min_shadow_f1: _Optional[float] = ..., max_class_mix_shift: _Optional[float] = ..., max_detection_rate_change: _Optional[float] = ..., shadow_sample_rate: _Optional[float] = ..., shadow_min_frames: _Optional[int] = ..., shadow_max_s: _Optional[float] = ..., pipeline_ref: _Optional[str] = ..., cameras_may_be_down: _Optional[bool] = ..., camera_grace_s: _Optional[float] = ..., shadow_phase: _Optional[str] = ...) -> None: ...

class RolloutDevice(_message.Message):
    __slots__ = ("device_id", "wave", "state", "previous_ref", "message", "command_id", "variant")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    WAVE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_REF_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    wave: int
    state: str
    previous_ref: str
    message: str
    command_id: str
    variant: str
    def __init__(self, device_id: _Optional[str] = ..., wave: _Optional[int] = ..., state: _Optional[str] = ..., previous_ref: _Optional[str] = ..., message: _Optional[str] = ..., command_id: _Optional[str] = ..., variant: _Optional[str] = ...) -> None: ...

class Rollout(_message.Message):
    __slots__ = ("rollout_id", "model_ref", "sha256", "selector", "waves", "state", "current_wave", "devices", "message", "created_at", "updated_at", "health_window_s", "max_failure_ratio", "min_fps", "max_latency_ms", "min_shadow_f1", "max_class_mix_shift", "max_detection_rate_change", "shadow_sample_rate", "shadow_min_frames", "shadow_max_s", "kind", "cameras_may_be_down", "camera_grace_s", "shadow_phase")
    class SelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_REF_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    WAVES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_WAVE_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    HEALTH_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    MAX_FAILURE_RATIO_FIELD_NUMBER: _ClassVar[int]
    MIN_FPS_FIELD_NUMBER: _ClassVar[int]
    MAX_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_SHADOW_F1_FIELD_NUMBER: _ClassVar[int]
    MAX_CLASS_MIX_SHIFT_FIELD_NUMBER: _ClassVar[int]
    MAX_DETECTION_RATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    SHADOW_SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    SHADOW_MIN_FRAMES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_MAX_S_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CAMERAS_MAY_BE_DOWN_FIELD_NUMBER: _ClassVar[int]
    CAMERA_GRACE_S_FIELD_NUMBER: _ClassVar[int]
    SHADOW_PHASE_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    model_ref: str
    sha256: str
    selector: _containers.ScalarMap[str, str]
    waves: _containers.RepeatedScalarFieldContainer[str]
    state: str
    current_wave: int
    devices: _containers.RepeatedCompositeFieldContainer[RolloutDevice]
    message: str
    created_at: float
    updated_at: float
    health_window_s: float
    max_failure_ratio: float
    min_fps: float
    max_latency_ms: float
    min_shadow_f1: float
    max_class_mix_shift: float
    max_detection_rate_change: float
    shadow_sample_rate: float
    shadow_min_frames: int
    shadow_max_s: float
    kind: str
    cameras_may_be_down: bool
    camera_grace_s: float
    shadow_phase: str
    def __init__(self, rollout_id: _Optional[str] = ..., model_ref: _Optional[str] = ..., sha256: _Optional[str] = ..., selector: _Optional[_Mapping[str, str]] = ..., waves: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ..., current_wave: _Optional[int] = ..., devices: _Optional[_Iterable[_Union[RolloutDevice, _Mapping]]] = ..., message: _Optional[str] = ..., created_at: _Optional[float] = ..., updated_at: _Optional[float] = ..., health_window_s: _Optional[float] = ..., max_failure_ratio: _Optional[float] = ..., min_fps: _Optional[float] = ..., max_latency_ms: _Optional[float] = ..., min_shadow_f1: _Optional[float] = ..., max_class_mix_shift: _Optional[float] = ..., max_detection_rate_change: _Optional[float] = ..., shadow_sample_rate: _Optional[float] = ..., shadow_min_frames: _Optional[int] = ..., shadow_max_s: _Optional[float] = ..., kind: _Optional[str] = ..., cameras_may_be_down: _Optional[bool] = ..., camera_grace_s: _Optional[float] = ..., shadow_phase: _Optional[str] = ...) -> None: ...

class GetRolloutRequest(_message.Message):
    __slots__ = ("rollout_id",)
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    def __init__(self, rollout_id: _Optional[str] = ...) -> None: ...

class ListRolloutsRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class ListRolloutsResponse(_message.Message):
    __slots__ = ("rollouts",)
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    rollouts: _containers.RepeatedCompositeFieldContainer[Rollout]
    def __init__(self, rollouts: _Optional[_Iterable[_Union[Rollout, _Mapping]]] = ...) -> None: ...

class ControlRolloutRequest(_message.Message):
    __slots__ = ("rollout_id", "action")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACTION_UNSPECIFIED: _ClassVar[ControlRolloutRequest.Action]
        ACTION_PAUSE: _ClassVar[ControlRolloutRequest.Action]
        ACTION_RESUME: _ClassVar[ControlRolloutRequest.Action]
        ACTION_ABORT: _ClassVar[ControlRolloutRequest.Action]
        ACTION_ROLLBACK: _ClassVar[ControlRolloutRequest.Action]
    ACTION_UNSPECIFIED: ControlRolloutRequest.Action
    ACTION_PAUSE: ControlRolloutRequest.Action
    ACTION_RESUME: ControlRolloutRequest.Action
    ACTION_ABORT: ControlRolloutRequest.Action
    ACTION_ROLLBACK: ControlRolloutRequest.Action
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    action: ControlRolloutRequest.Action
    def __init__(self, rollout_id: _Optional[str] = ..., action: _Optional[_Union[ControlRolloutRequest.Action, str]] = ...) -> None: ...
