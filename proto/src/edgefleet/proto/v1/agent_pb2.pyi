from edgefleet.proto.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Step(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_UNSPECIFIED: _ClassVar[Step]
    STEP_RECEIVED: _ClassVar[Step]
    STEP_DOWNLOADING: _ClassVar[Step]
    STEP_VERIFYING: _ClassVar[Step]
    STEP_INSTALLING: _ClassVar[Step]
    STEP_LOADING: _ClassVar[Step]
    STEP_WARMUP: _ClassVar[Step]
    STEP_GATE: _ClassVar[Step]
    STEP_CUTOVER: _ClassVar[Step]
    STEP_HEALTH: _ClassVar[Step]
    STEP_DONE: _ClassVar[Step]
    STEP_ROLLED_BACK: _ClassVar[Step]
STEP_UNSPECIFIED: Step
STEP_RECEIVED: Step
STEP_DOWNLOADING: Step
STEP_VERIFYING: Step
STEP_INSTALLING: Step
STEP_LOADING: Step
STEP_WARMUP: Step
STEP_GATE: Step
STEP_CUTOVER: Step
STEP_HEALTH: Step
STEP_DONE: Step
STEP_ROLLED_BACK: Step

class AgentMessage(_message.Message):
    __slots__ = ("hello", "status", "event")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    status: StatusReport
    event: CommandEvent
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., status: _Optional[_Union[StatusReport, _Mapping]] = ..., event: _Optional[_Union[CommandEvent, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("device_id", "labels", "capabilities", "pipelines", "agent_version")
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
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    labels: _containers.ScalarMap[str, str]
    capabilities: _common_pb2.Capabilities
    pipelines: _containers.RepeatedCompositeFieldContainer[_common_pb2.PipelineStatus]
    agent_version: str
    def __init__(self, device_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., capabilities: _Optional[_Union[_common_pb2.Capabilities, _Mapping]] = ..., pipelines: _Optional[_Iterable[_Union[_common_pb2.PipelineStatus, _Mapping]]] = ..., agent_version: _Optional[str] = ...) -> None: ...

class StatusReport(_message.Message):
    __slots__ = ("pipelines", "health", "sent_at")
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    pipelines: _containers.RepeatedCompositeFieldContainer[_common_pb2.PipelineStatus]
    health: _common_pb2.Health
    sent_at: float
    def __init__(self, pipelines: _Optional[_Iterable[_Union[_common_pb2.PipelineStatus, _Mapping]]] = ..., health: _Optional[_Union[_common_pb2.Health, _Mapping]] = ..., sent_at: _Optional[float] = ...) -> None: ...

class CommandEvent(_message.Message):
    __slots__ = ("command_id", "step", "done", "ok", "message", "duplicate", "at", "model_ref", "metrics", "last_good")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    MODEL_REF_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    LAST_GOOD_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    step: Step
    done: bool
    ok: bool
    message: str
    duplicate: bool
    at: float
    model_ref: str
    metrics: _containers.ScalarMap[str, float]
    last_good: bool
    def __init__(self, command_id: _Optional[str] = ..., step: _Optional[_Union[Step, str]] = ..., done: _Optional[bool] = ..., ok: _Optional[bool] = ..., message: _Optional[str] = ..., duplicate: _Optional[bool] = ..., at: _Optional[float] = ..., model_ref: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., last_good: _Optional[bool] = ...) -> None: ...

class ControllerMessage(_message.Message):
    __slots__ = ("welcome", "command")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    command: Command
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., command: _Optional[_Union[Command, _Mapping]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("controller_id", "status_interval_s")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    controller_id: str
    status_interval_s: float
    def __init__(self, controller_id: _Optional[str] = ..., status_interval_s: _Optional[float] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("command_id", "rollout_id", "apply", "rollback", "spec")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    APPLY_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    rollout_id: str
    apply: ApplyModel
    rollback: RollbackModel
    spec: ApplyPipelineSpec
    def __init__(self, command_id: _Optional[str] = ..., rollout_id: _Optional[str] = ..., apply: _Optional[_Union[ApplyModel, _Mapping]] = ..., rollback: _Optional[_Union[RollbackModel, _Mapping]] = ..., spec: _Optional[_Union[ApplyPipelineSpec, _Mapping]] = ...) -> None: ...

class ApplyPipelineSpec(_message.Message):
    __slots__ = ("name", "version", "sha256", "document", "health_window_s", "rollback", "sealed_secrets")
    class SealedSecretsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    HEALTH_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    SEALED_SECRETS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    sha256: str
    document: str
    health_window_s: float
    rollback: bool
    sealed_secrets: _containers.ScalarMap[str, bytes]
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., sha256: _Optional[str] = ..., document: _Optional[str] = ..., health_window_s: _Optional[float] = ..., rollback: _Optional[bool] = ..., sealed_secrets: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class ApplyModel(_message.Message):
    __slots__ = ("model", "health_window_s", "shadow")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HEALTH_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    health_window_s: float
    shadow: ShadowGate
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., health_window_s: _Optional[float] = ..., shadow: _Optional[_Union[ShadowGate, _Mapping]] = ...) -> None: ...

class ShadowGate(_message.Message):
    __slots__ = ("sample_rate", "max_busy", "min_frames", "max_s", "min_f1", "max_class_mix_shift", "max_detection_rate_change", "phase")
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    MAX_BUSY_FIELD_NUMBER: _ClassVar[int]
    MIN_FRAMES_FIELD_NUMBER: _ClassVar[int]
    MAX_S_FIELD_NUMBER: _ClassVar[int]
    MIN_F1_FIELD_NUMBER: _ClassVar[int]
    MAX_CLASS_MIX_SHIFT_FIELD_NUMBER: _ClassVar[int]
    MAX_DETECTION_RATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    sample_rate: float
    max_busy: float
    min_frames: int
    max_s: float
    min_f1: float
    max_class_mix_shift: float
    max_detection_rate_change: float
    phase: str
    def __init__(self, sample_rate: _Optional[float] = ..., max_busy: _Optional[float] = ..., min_frames: _Optional[int] = ..., max_s: _Optional[float] = ..., min_f1: _Optional[float] = ..., max_class_mix_shift: _Optional[float] = ..., max_detection_rate_change: _Optional[float] = ..., phase: _Optional[str] = ...) -> None: ...

class RollbackModel(_message.Message):
    __slots__ = ("model_name", "to_ref")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    TO_REF_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    to_ref: str
    def __init__(self, model_name: _Optional[str] = ..., to_ref: _Optional[str] = ...) -> None: ...

class FetchArtifactRequest(_message.Message):
    __slots__ = ("sha256", "offset", "device_id")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    offset: int
    device_id: str
    def __init__(self, sha256: _Optional[str] = ..., offset: _Optional[int] = ..., device_id: _Optional[str] = ...) -> None: ...

class ArtifactChunk(_message.Message):
    __slots__ = ("offset", "data", "total_size")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    total_size: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., total_size: _Optional[int] = ...) -> None: ...
