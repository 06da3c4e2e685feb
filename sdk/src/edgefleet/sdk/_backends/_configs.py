"""The built-in backends' configs (``backend: {type: onnxruntime, ...}``): light, so that validating a
pipeline config never imports an inference library."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ._base import BackendConfig

__all__ = ["OnnxRuntimeConfig", "TensorRTConfig"]


class OnnxRuntimeConfig(BackendConfig):
    """ONNX Runtime. ``providers`` in order of preference; the default follows ``device``:
    ``cuda:N`` → TensorRT EP (when ORT has it) → CUDA EP → CPU; ``cpu`` → CPU."""

    type: Literal["onnxruntime"] = "onnxruntime"
    providers: tuple[str, ...] | None = Field(None, description="ORT execution providers, best first")
    intra_op_threads: int | None = Field(None, ge=1, le=256, description="CPU threads per inference")
    io_binding: bool = Field(True, description="Bind device buffers (CUDA) so nothing round-trips the host")
    cuda_graph: bool = Field(False, description="Capture the CUDA EP run in a CUDA graph (fixed shapes)")
    pad_batch: bool = Field(
        True,
        description="CUDA: run every batch at the input buffer's full size (one input shape). ONNX Runtime's "
        "CUDA EP re-plans its convolutions whenever the input shape changes, which costs far more than the "
        "padding rows (docs/gpu.md); the padding rows' outputs are never read",
    )
    fp16: bool = Field(False, description="TensorRT EP: allow FP16 kernels")


class TensorRTConfig(BackendConfig):
    """TensorRT (>= 10): engine built from the ONNX on first use and cached."""

    type: Literal["tensorrt"] = "tensorrt"
    precision: Literal["fp32", "fp16", "int8"] = "fp16"
    workspace_mb: int = Field(2048, ge=64)
    cache_dir: Path | None = Field(None, description="Engine cache (default ~/.cache/edgefleet/engines)")
    int8_calibration_cache: Path | None = None
    timing_cache: bool = True
