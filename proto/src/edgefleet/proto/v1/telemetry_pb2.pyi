import datetime

from edgefleet.proto.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TelemetryModel(_message.Message):
    __slots__ = ("pipeline", "name", "version")
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    pipeline: str
    name: str
    version: str
    def __init__(self, pipeline: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class TelemetryHeader(_message.Message):
    __slots__ = ("device_id", "fleet", "sequence", "time", "models", "schema", "prev")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PREV_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    fleet: str
    sequence: int
    time: _timestamp_pb2.Timestamp
    models: _containers.RepeatedCompositeFieldContainer[TelemetryModel]
    schema: int
    prev: int
    def __init__(self, device_id: _Optional[str] = ..., fleet: _Optional[str] = ..., sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., models: _Optional[_Iterable[_Union[TelemetryModel, _Mapping]]] = ..., schema: _Optional[int] = ..., prev: _Optional[int] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("device_id", "fleet", "sequence", "time", "replica", "highest")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    fleet: str
    sequence: int
    time: _timestamp_pb2.Timestamp
    replica: str
    highest: int
    def __init__(self, device_id: _Optional[str] = ..., fleet: _Optional[str] = ..., sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., replica: _Optional[str] = ..., highest: _Optional[int] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("header", "state", "connection", "last_will", "agent_version", "started_at", "reason", "labels")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Status.State]
        STATE_ONLINE: _ClassVar[Status.State]
        STATE_OFFLINE: _ClassVar[Status.State]
    STATE_UNSPECIFIED: Status.State
    STATE_ONLINE: Status.State
    STATE_OFFLINE: Status.State
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONNECTION_FIELD_NUMBER: _ClassVar[int]
    LAST_WILL_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    header: TelemetryHeader
    state: Status.State
    connection: int
    last_will: bool
    agent_version: str
    started_at: _timestamp_pb2.Timestamp
    reason: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, header: _Optional[_Union[TelemetryHeader, _Mapping]] = ..., state: _Optional[_Union[Status.State, str]] = ..., connection: _Optional[int] = ..., last_will: _Optional[bool] = ..., agent_version: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Telemetry(_message.Message):
    __slots__ = ("header", "interval_s", "pipelines", "system", "spool")
    class Latency(_message.Message):
        __slots__ = ("p50_ms", "p95_ms", "p99_ms")
        P50_MS_FIELD_NUMBER: _ClassVar[int]
        P95_MS_FIELD_NUMBER: _ClassVar[int]
        P99_MS_FIELD_NUMBER: _ClassVar[int]
        p50_ms: float
        p95_ms: float
        p99_ms: float
        def __init__(self, p50_ms: _Optional[float] = ..., p95_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ...) -> None: ...
    class Stage(_message.Message):
        __slots__ = ("name", "items", "rate", "latency")
        NAME_FIELD_NUMBER: _ClassVar[int]
        ITEMS_FIELD_NUMBER: _ClassVar[int]
        RATE_FIELD_NUMBER: _ClassVar[int]
        LATENCY_FIELD_NUMBER: _ClassVar[int]
        name: str
        items: int
        rate: float
        latency: Telemetry.Latency
        def __init__(self, name: _Optional[str] = ..., items: _Optional[int] = ..., rate: _Optional[float] = ..., latency: _Optional[_Union[Telemetry.Latency, _Mapping]] = ...) -> None: ...
    class Stream(_message.Message):
        __slots__ = ("stream_id", "live", "fps", "frames_in", "results", "dropped", "reconnects", "outages", "outage_seconds", "pixel_copies", "errors", "latency", "connected", "last_error", "model_version", "recent_error", "recent_error_at", "state", "state_reason", "state_seconds")
        STREAM_ID_FIELD_NUMBER: _ClassVar[int]
        LIVE_FIELD_NUMBER: _ClassVar[int]
        FPS_FIELD_NUMBER: _ClassVar[int]
        FRAMES_IN_FIELD_NUMBER: _ClassVar[int]
        RESULTS_FIELD_NUMBER: _ClassVar[int]
        DROPPED_FIELD_NUMBER: _ClassVar[int]
        RECONNECTS_FIELD_NUMBER: _ClassVar[int]
        OUTAGES_FIELD_NUMBER: _ClassVar[int]
        OUTAGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
        PIXEL_COPIES_FIELD_NUMBER: _ClassVar[int]
        ERRORS_FIELD_NUMBER: _ClassVar[int]
        LATENCY_FIELD_NUMBER: _ClassVar[int]
        CONNECTED_FIELD_NUMBER: _ClassVar[int]
        LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
        MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
        RECENT_ERROR_FIELD_NUMBER: _ClassVar[int]
        RECENT_ERROR_AT_FIELD_NUMBER: _ClassVar[int]
        STATE_FIELD_NUMBER: _ClassVar[int]
        STATE_REASON_FIELD_NUMBER: _ClassVar[int]
        STATE_SECONDS_FIELD_NUMBER: _ClassVar[int]
        stream_id: str
        live: bool
        fps: float
        frames_in: int
        results: int
        dropped: int
        reconnects: int
        outages: int
        outage_seconds: float
        pixel_copies: int
        errors: int
        latency: Telemetry.Latency
        connected: bool
        last_error: str
        model_version: str
        recent_error: str
        recent_error_at: _timestamp_pb2.Timestamp
        state: str
        state_reason: str
        state_seconds: float
        def __init__(self, stream_id: _Optional[str] = ..., live: _Optional[bool] = ..., fps: _Optional[float] = ..., frames_in: _Optional[int] = ..., results: _Optional[int] = ..., dropped: _Optional[int] = ..., reconnects: _Optional[int] = ..., outages: _Optional[int] = ..., outage_seconds: _Optional[float] = ..., pixel_copies: _Optional[int] = ..., errors: _Optional[int] = ..., latency: _Optional[_Union[Telemetry.Latency, _Mapping]] = ..., connected: _Optional[bool] = ..., last_error: _Optional[str] = ..., model_version: _Optional[str] = ..., recent_error: _Optional[str] = ..., recent_error_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[str] = ..., state_reason: _Optional[str] = ..., state_seconds: _Optional[float] = ...) -> None: ...
    class Region(_message.Message):
        __slots__ = ("stream_id", "name", "kind", "label", "inside", "in_total", "out_total", "in_window", "out_window", "window_s")
        STREAM_ID_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        KIND_FIELD_NUMBER: _ClassVar[int]
        LABEL_FIELD_NUMBER: _ClassVar[int]
        INSIDE_FIELD_NUMBER: _ClassVar[int]
        IN_TOTAL_FIELD_NUMBER: _ClassVar[int]
        OUT_TOTAL_FIELD_NUMBER: _ClassVar[int]
        IN_WINDOW_FIELD_NUMBER: _ClassVar[int]
        OUT_WINDOW_FIELD_NUMBER: _ClassVar[int]
        WINDOW_S_FIELD_NUMBER: _ClassVar[int]
        stream_id: str
        name: str
        kind: str
        label: str
        inside: int
        in_total: int
        out_total: int
        in_window: int
        out_window: int
        window_s: float
        def __init__(self, stream_id: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[str] = ..., label: _Optional[str] = ..., inside: _Optional[int] = ..., in_total: _Optional[int] = ..., out_total: _Optional[int] = ..., in_window: _Optional[int] = ..., out_window: _Optional[int] = ..., window_s: _Optional[float] = ...) -> None: ...
    class AnalyticsStage(_message.Message):
        __slots__ = ("stage", "values")
        class ValuesEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: float
            def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
        STAGE_FIELD_NUMBER: _ClassVar[int]
        VALUES_FIELD_NUMBER: _ClassVar[int]
        stage: str
        values: _containers.ScalarMap[str, float]
        def __init__(self, stage: _Optional[str] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...
    class Pipeline(_message.Message):
        __slots__ = ("name", "fps", "frames_in", "results", "dropped", "errors", "elapsed_s", "batches", "mean_batch", "copies_per_frame", "queue_depths", "pixel_copies", "stages", "streams", "model_version", "latency", "regions", "analytics", "quality")
        class QueueDepthsEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: int
            def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
        class PixelCopiesEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: int
            def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
        NAME_FIELD_NUMBER: _ClassVar[int]
        FPS_FIELD_NUMBER: _ClassVar[int]
        FRAMES_IN_FIELD_NUMBER: _ClassVar[int]
        RESULTS_FIELD_NUMBER: _ClassVar[int]
        DROPPED_FIELD_NUMBER: _ClassVar[int]
        ERRORS_FIELD_NUMBER: _ClassVar[int]
        ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
        BATCHES_FIELD_NUMBER: _ClassVar[int]
        MEAN_BATCH_FIELD_NUMBER: _ClassVar[int]
        COPIES_PER_FRAME_FIELD_NUMBER: _ClassVar[int]
        QUEUE_DEPTHS_FIELD_NUMBER: _ClassVar[int]
        PIXEL_COPIES_FIELD_NUMBER: _ClassVar[int]
        STAGES_FIELD_NUMBER: _ClassVar[int]
        STREAMS_FIELD_NUMBER: _ClassVar[int]
        MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
        LATENCY_FIELD_NUMBER: _ClassVar[int]
        REGIONS_FIELD_NUMBER: _ClassVar[int]
        ANALYTICS_FIELD_NUMBER: _ClassVar[int]
        QUALITY_FIELD_NUMBER: _ClassVar[int]
        name: str
        fps: float
        frames_in: int
        results: int
        dropped: int
        errors: int
        elapsed_s: float
        batches: int
        mean_batch: float
        copies_per_frame: float
        queue_depths: _containers.ScalarMap[str, int]
        pixel_copies: _containers.ScalarMap[str, int]
        stages: _containers.RepeatedCompositeFieldContainer[Telemetry.Stage]
        streams: _containers.RepeatedCompositeFieldContainer[Telemetry.Stream]
        model_version: str
        latency: Telemetry.Latency
        regions: _containers.RepeatedCompositeFieldContainer[Telemetry.Region]
        analytics: _containers.RepeatedCompositeFieldContainer[Telemetry.AnalyticsStage]
        quality: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelQuality]
        def __init__(self, name: _Optional[str] = ..., fps: _Optional[float] = ..., frames_in: _Optional[int] = ..., results: _Optional[int] = ..., dropped: _Optional[int] = ..., errors: _Optional[int] = ..., elapsed_s: _Optional[float] = ..., batches: _Optional[int] = ..., mean_batch: _Optional[float] = ..., copies_per_frame: _Optional[float] = ..., queue_depths: _Optional[_Mapping[str, int]] = ..., pixel_copies: _Optional[_Mapping[str, int]] = ..., stages: _Optional[_Iterable[_Union[Telemetry.Stage, _Mapping]]] = ..., streams: _Optional[_Iterable[_Union[Telemetry.Stream, _Mapping]]] = ..., model_version: _Optional[str] = ..., latency: _Optional[_Union[Telemetry.Latency, _Mapping]] = ..., regions: _Optional[_Iterable[_Union[Telemetry.Region, _Mapping]]] = ..., analytics: _Optional[_Iterable[_Union[Telemetry.AnalyticsStage, _Mapping]]] = ..., quality: _Optional[_Iterable[_Union[_common_pb2.ModelQuality, _Mapping]]] = ...) -> None: ...
    class Gpu(_message.Message):
        __slots__ = ("index", "name", "utilization_pct", "memory_used_bytes", "memory_total_bytes", "temperature_c", "power_w", "emc_utilization_pct")
        INDEX_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        UTILIZATION_PCT_FIELD_NUMBER: _ClassVar[int]
        MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
        MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
        TEMPERATURE_C_FIELD_NUMBER: _ClassVar[int]
        POWER_W_FIELD_NUMBER: _ClassVar[int]
        EMC_UTILIZATION_PCT_FIELD_NUMBER: _ClassVar[int]
        index: int
        name: str
        utilization_pct: float
        memory_used_bytes: int
        memory_total_bytes: int
        temperature_c: float
        power_w: float
        emc_utilization_pct: float
        def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., utilization_pct: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., temperature_c: _Optional[float] = ..., power_w: _Optional[float] = ..., emc_utilization_pct: _Optional[float] = ...) -> None: ...
    class System(_message.Message):
        __slots__ = ("cpu_pct", "cpu_per_core_pct", "ram_used_bytes", "ram_total_bytes", "disk_used_bytes", "disk_total_bytes", "gpus", "temperatures_c", "power_w", "gpu_source")
        class TemperaturesCEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: float
            def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
        class PowerWEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: float
            def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
        CPU_PCT_FIELD_NUMBER: _ClassVar[int]
        CPU_PER_CORE_PCT_FIELD_NUMBER: _ClassVar[int]
        RAM_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
        RAM_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
        DISK_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
        DISK_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
        GPUS_FIELD_NUMBER: _ClassVar[int]
        TEMPERATURES_C_FIELD_NUMBER: _ClassVar[int]
        POWER_W_FIELD_NUMBER: _ClassVar[int]
        GPU_SOURCE_FIELD_NUMBER: _ClassVar[int]
        cpu_pct: float
        cpu_per_core_pct: _containers.RepeatedScalarFieldContainer[float]
        ram_used_bytes: int
        ram_total_bytes: int
        disk_used_bytes: int
        disk_total_bytes: int
        gpus: _containers.RepeatedCompositeFieldContainer[Telemetry.Gpu]
        temperatures_c: _containers.ScalarMap[str, float]
        power_w: _containers.ScalarMap[str, float]
        gpu_source: str
        def __init__(self, cpu_pct: _Optional[float] = ..., cpu_per_core_pct: _Optional[_Iterable[float]] = ..., ram_used_bytes: _Optional[int] = ..., ram_total_bytes: _Optional[int] = ..., disk_used_bytes: _Optional[int] = ..., disk_total_bytes: _Optional[int] = ..., gpus: _Optional[_Iterable[_Union[Telemetry.Gpu, _Mapping]]] = ..., temperatures_c: _Optional[_Mapping[str, float]] = ..., power_w: _Optional[_Mapping[str, float]] = ..., gpu_source: _Optional[str] = ...) -> None: ...
    class Spool(_message.Message):
        __slots__ = ("pending", "dropped", "bytes")
        PENDING_FIELD_NUMBER: _ClassVar[int]
        DROPPED_FIELD_NUMBER: _ClassVar[int]
        BYTES_FIELD_NUMBER: _ClassVar[int]
        pending: int
        dropped: int
        bytes: int
        def __init__(self, pending: _Optional[int] = ..., dropped: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    SPOOL_FIELD_NUMBER: _ClassVar[int]
    header: TelemetryHeader
    interval_s: float
    pipelines: _containers.RepeatedCompositeFieldContainer[Telemetry.Pipeline]
    system: Telemetry.System
    spool: Telemetry.Spool
    def __init__(self, header: _Optional[_Union[TelemetryHeader, _Mapping]] = ..., interval_s: _Optional[float] = ..., pipelines: _Optional[_Iterable[_Union[Telemetry.Pipeline, _Mapping]]] = ..., system: _Optional[_Union[Telemetry.System, _Mapping]] = ..., spool: _Optional[_Union[Telemetry.Spool, _Mapping]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("header", "detections", "swap", "engine_build", "error", "analytics")
    class Box(_message.Message):
        __slots__ = ("x1", "y1", "x2", "y2")
        X1_FIELD_NUMBER: _ClassVar[int]
        Y1_FIELD_NUMBER: _ClassVar[int]
        X2_FIELD_NUMBER: _ClassVar[int]
        Y2_FIELD_NUMBER: _ClassVar[int]
        x1: float
        y1: float
        x2: float
        y2: float
        def __init__(self, x1: _Optional[float] = ..., y1: _Optional[float] = ..., x2: _Optional[float] = ..., y2: _Optional[float] = ...) -> None: ...
    class Detection(_message.Message):
        __slots__ = ("label", "score", "box", "class_id")
        LABEL_FIELD_NUMBER: _ClassVar[int]
        SCORE_FIELD_NUMBER: _ClassVar[int]
        BOX_FIELD_NUMBER: _ClassVar[int]
        CLASS_ID_FIELD_NUMBER: _ClassVar[int]
        label: str
        score: float
        box: Event.Box
        class_id: int
        def __init__(self, label: _Optional[str] = ..., score: _Optional[float] = ..., box: _Optional[_Union[Event.Box, _Mapping]] = ..., class_id: _Optional[int] = ...) -> None: ...
    class Detections(_message.Message):
        __slots__ = ("pipeline", "stream_id", "frame_sequence", "captured_at", "model_version", "detections", "suppressed")
        PIPELINE_FIELD_NUMBER: _ClassVar[int]
        STREAM_ID_FIELD_NUMBER: _ClassVar[int]
        FRAME_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
        CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
        MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
        DETECTIONS_FIELD_NUMBER: _ClassVar[int]
        SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
        pipeline: str
        stream_id: str
        frame_sequence: int
        captured_at: _timestamp_pb2.Timestamp
        model_version: str
        detections: _containers.RepeatedCompositeFieldContainer[Event.Detection]
        suppressed: int
        def __init__(self, pipeline: _Optional[str] = ..., stream_id: _Optional[str] = ..., frame_sequence: _Optional[int] = ..., captured_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model_version: _Optional[str] = ..., detections: _Optional[_Iterable[_Union[Event.Detection, _Mapping]]] = ..., suppressed: _Optional[int] = ...) -> None: ...
    class Swap(_message.Message):
        __slots__ = ("pipeline", "phase", "from_version", "to_version", "reason", "duration_s", "rollout_id")
        class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            PHASE_UNSPECIFIED: _ClassVar[Event.Swap.Phase]
            PHASE_STARTED: _ClassVar[Event.Swap.Phase]
            PHASE_SUCCEEDED: _ClassVar[Event.Swap.Phase]
            PHASE_FAILED: _ClassVar[Event.Swap.Phase]
            PHASE_ROLLED_BACK: _ClassVar[Event.Swap.Phase]
        PHASE_UNSPECIFIED: Event.Swap.Phase
        PHASE_STARTED: Event.Swap.Phase
        PHASE_SUCCEEDED: Event.Swap.Phase
        PHASE_FAILED: Event.Swap.Phase
        PHASE_ROLLED_BACK: Event.Swap.Phase
        PIPELINE_FIELD_NUMBER: _ClassVar[int]
        PHASE_FIELD_NUMBER: _ClassVar[int]
        FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
        TO_VERSION_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        DURATION_S_FIELD_NUMBER: _ClassVar[int]
        ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
        pipeline: str
        phase: Event.Swap.Phase
        from_version: str
        to_version: str
        reason: str
        duration_s: float
        rollout_id: str
        def __init__(self, pipeline: _Optional[str] = ..., phase: _Optional[_Union[Event.Swap.Phase, str]] = ..., from_version: _Optional[str] = ..., to_version: _Optional[str] = ..., reason: _Optional[str] = ..., duration_s: _Optional[float] = ..., rollout_id: _Optional[str] = ...) -> None: ...
    class EngineBuild(_message.Message):
        __slots__ = ("model_version", "target", "progress", "done", "error")
        MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
        TARGET_FIELD_NUMBER: _ClassVar[int]
        PROGRESS_FIELD_NUMBER: _ClassVar[int]
        DONE_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        model_version: str
        target: str
        progress: float
        done: bool
        error: str
        def __init__(self, model_version: _Optional[str] = ..., target: _Optional[str] = ..., progress: _Optional[float] = ..., done: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...
    class Error(_message.Message):
        __slots__ = ("component", "message")
        COMPONENT_FIELD_NUMBER: _ClassVar[int]
        MESSAGE_FIELD_NUMBER: _ClassVar[int]
        component: str
        message: str
        def __init__(self, component: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
    class Analytics(_message.Message):
        __slots__ = ("pipeline", "stream_id", "frame_sequence", "captured_at", "model_version", "kind", "region", "track_id", "label", "class_id", "direction", "dwell_s", "box", "reason", "suppressed")
        class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            KIND_UNSPECIFIED: _ClassVar[Event.Analytics.Kind]
            KIND_ZONE_ENTER: _ClassVar[Event.Analytics.Kind]
            KIND_ZONE_LEAVE: _ClassVar[Event.Analytics.Kind]
            KIND_ZONE_DWELL: _ClassVar[Event.Analytics.Kind]
            KIND_LINE_CROSS: _ClassVar[Event.Analytics.Kind]
            KIND_TRACK_END: _ClassVar[Event.Analytics.Kind]
        KIND_UNSPECIFIED: Event.Analytics.Kind
        KIND_ZONE_ENTER: Event.Analytics.Kind
        KIND_ZONE_LEAVE: Event.Analytics.Kind
        KIND_ZONE_DWELL: Event.Analytics.Kind
        KIND_LINE_CROSS: Event.Analytics.Kind
        KIND_TRACK_END: Event.Analytics.Kind
        PIPELINE_FIELD_NUMBER: _ClassVar[int]
        STREAM_ID_FIELD_NUMBER: _ClassVar[int]
        FRAME_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
        CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
        MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
        KIND_FIELD_NUMBER: _ClassVar[int]
        REGION_FIELD_NUMBER: _ClassVar[int]
        TRACK_ID_FIELD_NUMBER: _ClassVar[int]
        LABEL_FIELD_NUMBER: _ClassVar[int]
        CLASS_ID_FIELD_NUMBER: _ClassVar[int]
        DIRECTION_FIELD_NUMBER: _ClassVar[int]
        DWELL_S_FIELD_NUMBER: _ClassVar[int]
        BOX_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
        pipeline: str
        stream_id: str
        frame_sequence: int
        captured_at: _timestamp_pb2.Timestamp
        model_version: str
        kind: Event.Analytics.Kind
        region: str
        track_id: int
        label: str
        class_id: int
        direction: str
        dwell_s: float
        box: Event.Box
        reason: str
        suppressed: int
        def __init__(self, pipeline: _Optional[str] = ..., stream_id: _Optional[str] = ..., frame_sequence: _Optional[int] = ..., captured_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model_version: _Optional[str] = ..., kind: _Optional[_Union[Event.Analytics.Kind, str]] = ..., region: _Optional[str] = ..., track_id: _Optional[int] = ..., label: _Optional[str] = ..., class_id: _Optional[int] = ..., direction: _Optional[str] = ..., dwell_s: _Optional[float] = ..., box: _Optional[_Union[Event.Box, _Mapping]] = ..., reason: _Optional[str] = ..., suppressed: _Optional[int] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DETECTIONS_FIELD_NUMBER: _ClassVar[int]
    SWAP_FIELD_NUMBER: _ClassVar[int]
    ENGINE_BUILD_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ANALYTICS_FIELD_NUMBER: _ClassVar[int]
    header: TelemetryHeader
    detections: Event.Detections
    swap: Event.Swap
    engine_build: Event.EngineBuild
    error: Event.Error
    analytics: Event.Analytics
    def __init__(self, header: _Optional[_Union[TelemetryHeader, _Mapping]] = ..., detections: _Optional[_Union[Event.Detections, _Mapping]] = ..., swap: _Optional[_Union[Event.Swap, _Mapping]] = ..., engine_build: _Optional[_Union[Event.EngineBuild, _Mapping]] = ..., error: _Optional[_Union[Event.Error, _Mapping]] = ..., analytics: _Optional[_Union[Event.Analytics, _Mapping]] = ...) -> None: ...
