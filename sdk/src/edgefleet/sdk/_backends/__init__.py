"""Inference backends, the ``backend`` kind of the extension seam: the registry, and the built-ins
registered here (``onnxruntime``, ``tensorrt``), chosen by the ``backend.type`` config key.

Applications add theirs with ``register_backend``; installed distributions through the
``edgefleet.backends`` entry-point group (see ``_registry``). The factories import their inference
library only when a backend is built.
"""

from __future__ import annotations

from ._base import (
    BACKENDS,
    Backend,
    BackendConfig,
    InputBuffer,
    TensorSpec,
    create_backend,
    register_backend,
)
from ._configs import OnnxRuntimeConfig, TensorRTConfig

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendConfig",
    "InputBuffer",
    "OnnxRuntimeConfig",
    "TensorRTConfig",
    "TensorSpec",
    "create_backend",
    "register_backend",
]


def _onnxruntime(config: OnnxRuntimeConfig, device: str) -> Backend:
    from ._onnxruntime import OnnxRuntimeBackend

    return OnnxRuntimeBackend(config, device)


def _tensorrt(config: TensorRTConfig, device: str) -> Backend:
    from ._tensorrt import TensorRTBackend

    return TensorRTBackend(config, device)


BACKENDS.register("onnxruntime", OnnxRuntimeConfig, _onnxruntime, extra="cpu")
BACKENDS.register("tensorrt", TensorRTConfig, _tensorrt)
