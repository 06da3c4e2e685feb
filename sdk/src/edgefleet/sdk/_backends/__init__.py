"""Inference backends, chosen by the ``backend.type`` config key."""

from __future__ import annotations

from .._config import OnnxRuntimeConfig, TensorRTConfig
from .._errors import BackendError
from ._base import Backend, InputBuffer, TensorSpec

__all__ = ["Backend", "InputBuffer", "TensorSpec", "create_backend"]


def create_backend(config: OnnxRuntimeConfig | TensorRTConfig, device: str) -> Backend:
    """Build (not load) the backend a config selects."""
    if isinstance(config, OnnxRuntimeConfig):
        from ._onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend(config, device)
    if isinstance(config, TensorRTConfig):
        try:
            from ._tensorrt import TensorRTBackend
        except ImportError as exc:
            raise BackendError(f"the tensorrt backend is not available in this build: {exc}") from None
        return TensorRTBackend(config, device)
    raise BackendError(f"unknown backend config {type(config).__name__}")
