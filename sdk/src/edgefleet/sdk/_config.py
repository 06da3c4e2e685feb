"""Pipeline configuration: a strict schema validated once, from Python, the CLI or a YAML file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, SerializeAsAny, field_validator

from ._analytics import ANALYTICS, AnalyticsConfig
from ._backends import BACKENDS, BackendConfig, OnnxRuntimeConfig, TensorRTConfig
from ._errors import ConfigError
from ._sinks import SINKS, SinkConfig
from ._sources import SOURCES, SourceConfig
from ._yaml import load_yaml_mapping, validate_mapping

__all__ = [
    "BackendConfig",
    "OnnxRuntimeConfig",
    "PipelineConfig",
    "SinkConfig",
    "TensorRTConfig",
    "load_pipeline_config",
]


_CUDA_DEVICE = re.compile(r"^cuda(:(\d+|GPU-[0-9A-Fa-f-]{8,}|MIG-[0-9A-Za-z/-]{8,}))?\Z")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # "should be a finite number"


def _source(value: object) -> str | SourceConfig:
    """A source string stays a string (parsed when the pipeline is made); anything else is a source config."""
    return value if isinstance(value, str) else SOURCES.coerce(value)


SourceItem = Annotated[str | SerializeAsAny[SourceConfig], PlainValidator(_source)]
"""A source string (``rtsp://...``, ``clip.mp4``) or a source config (``{type: network, url: ...}``)."""


class PipelineConfig(_Strict):
    """Everything a pipeline needs. Example (YAML)::

    model: models/nanodet-m
    sources: [models/media/vtest-300.mp4, "cam1=rtsp://user:pass@10.0.0.5/stream",
              {type: network, id: cam2, url: "rtsp://10.0.0.6/stream", transport: udp}]
    device: cpu
    max_batch: 4
    sinks: [{type: jsonl, path: out.jsonl}]
    analytics: []            # stages of the analytics kind, e.g. [{type: track}], in order
    """

    model: Path
    sources: tuple[SourceItem, ...] = Field(min_length=1, description="Source strings or {type: ...} mappings")
    device: str = Field("cpu", description="cpu, cuda:N, cuda:GPU-<uuid> or cuda:MIG-<uuid>")
    backend: Annotated[SerializeAsAny[BackendConfig], BACKENDS.validator] = Field(
        default_factory=OnnxRuntimeConfig,
        description="The inference backend: {type: onnxruntime|tensorrt|<plugin>, ...}",
    )
    max_batch: int = Field(1, ge=1, le=256)
    batch_timeout_ms: float = Field(10.0, ge=0, le=10_000, description="Longest wait to fill a batch")
    score_threshold: float | None = Field(None, ge=0, le=1, description="Overrides the manifest's")
    iou_threshold: float | None = Field(None, ge=0, le=1)
    max_frames: int | None = Field(None, ge=1, description="Stop each source after this many frames")
    source_timeout_s: float = Field(
        0.0,
        ge=0,
        le=86_400,
        description="Fail when no source has delivered a frame this many seconds after the start (0: wait for ever)",
    )
    sinks: tuple[Annotated[SerializeAsAny[SinkConfig], SINKS.validator], ...] = Field(
        (), description="Where results go: {type: jsonl|video|<plugin>, ...}"
    )
    analytics: tuple[Annotated[SerializeAsAny[AnalyticsConfig], ANALYTICS.validator], ...] = Field(
        (), description="Analytics stages between decoding and the sinks, applied in this order"
    )
    analytics_thread: bool | None = Field(
        None,
        description="With analytics stages: run them and the sinks on a thread of their own, beside the "
        "decoding (False: on the decoding thread, one after the other; docs/benchmarks.md measures both). "
        "Unset: a thread of their own, except when every stage runs in the analytics process "
        "(analytics_process), where the decoding thread sends each batch there and decodes the next one "
        "meanwhile (docs/gpu.md measures it)",
    )
    analytics_process: bool = Field(
        False,
        description="Run the built-in analytics stages (track, zones) in a process of their own, off the "
        "pipeline's GIL: for many streams on a GPU, where the pipeline's Python work bounds its throughput "
        "(docs/gpu.md measures it); an app's own stages stay in the pipeline's process",
    )
    keep_raw: bool = Field(
        False,
        description="Attach the raw output tensors to each result (on a GPU this also turns off the GPU "
        "output filters, so the whole tensors come back)",
    )
    frame_upload: bool = Field(
        False,
        description="cuda on a discrete GPU: upload each CPU-decoded frame whole (one DMA copy) instead of "
        "the preprocessing kernel reading the pixels it samples from the pinned frame slot in place "
        "(the default: no copy, and no per-frame call on the batch thread; measurements in docs/gpu.md); "
        "integrated GPUs always read in place",
    )
    infer_workers: int | None = Field(
        None,
        ge=1,
        le=16,
        description="Batches inferred at once (threads sharing one model). Default: 2 for ONNX Runtime on "
        "a CPU with 2+ cores (each run single-threaded), else 1. ONNX Runtime on cuda:N gives each worker "
        "its own session and CUDA stream (docs/gpu.md#inference-lanes)",
    )

    @field_validator("device")
    @classmethod
    def _check_device(cls, v: str) -> str:
        if v == "cpu" or _CUDA_DEVICE.match(v):
            return "cuda:0" if v == "cuda" else v
        raise ValueError(f"must be cpu, cuda:N, cuda:GPU-<uuid> or cuda:MIG-<uuid>, got {v!r}")


def load_pipeline_config(path: Path) -> PipelineConfig:
    """Read a YAML pipeline config; errors name the file and the field."""
    return validate_mapping(PipelineConfig, load_yaml_mapping(path, ConfigError), str(path), ConfigError)
