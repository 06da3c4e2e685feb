"""The backend contract every inference backend implements, and the buffer preprocessing writes into."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._buffer import InputBuffer
from .._errors import BackendError
from .._registry import PluginConfig, Registry
from .._sparse import CandidateFilter

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendConfig",
    "InputBuffer",
    "TensorSpec",
    "create_backend",
    "register_backend",
]


class BackendConfig(PluginConfig):
    """Base of a backend's config: ``type: Literal["<key>"]`` and its settings (strict)."""


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output as the backend sees it; -1 marks a dynamic dimension."""

    name: str
    shape: tuple[int, ...]
    dtype: str


class Backend(ABC):
    """Lifecycle: ``load`` → ``inputs``/``outputs`` → ``allocate_input`` → ``warmup`` → ``infer``* → ``close``.

    ``infer`` runs one batch of ``n`` rows from an input buffer and returns host arrays with exactly ``n``
    rows per output. A backend is used from one thread at a time; buffers are reused, never reallocated
    per batch.
    """

    #: True when ``infer`` may run from several threads at once on different buffers (ONNX Runtime's CPU
    #: sessions); the pipeline then runs several inference workers on one loaded model.
    concurrent_infer: bool = False
    #: threads that will call ``infer`` at once (the pipeline's inference workers), set before ``load``;
    #: a GPU backend may give each its own stream and execution context so their work overlaps
    workers: int = 1

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.inputs: tuple[TensorSpec, ...] = ()
        self.outputs: tuple[TensorSpec, ...] = ()
        #: the input shape buffers are allocated with: the model's, with dynamic non-batch dimensions
        #: fixed by the manifest (see :meth:`declare_input_shape`)
        self.input_shape: tuple[int, ...] | None = None

    def declare_input_shape(self, declared: tuple[int, ...]) -> None:
        """Fix the model's dynamic non-batch input dimensions from the manifest (e.g. a face detector
        exported with symbolic height/width). The batch dimension stays as the model has it."""
        real = self.inputs[0].shape
        merged = [real[0]] + [r if r > 0 else d for r, d in zip(real[1:], declared[1:], strict=False)]
        self.input_shape = tuple(merged)

    @abstractmethod
    def load(self, model_path: Path) -> None:
        """Load the model; raises BackendError (or ModelPackageError subclasses) with a clear message."""

    @property
    def fixed_batch(self) -> int | None:
        """The batch size the model requires, or None when its batch dimension is dynamic."""
        shape = self.inputs[0].shape if self.inputs else ()
        return shape[0] if shape and shape[0] > 0 else None

    @abstractmethod
    def allocate_input(self, batch: int) -> InputBuffer:
        """Preallocate an input buffer with room for ``batch`` rows."""

    @abstractmethod
    def infer(self, buffer: InputBuffer, n: int) -> dict[str, np.ndarray]:
        """Run rows ``[0, n)`` of ``buffer``; outputs are host arrays with ``n`` rows each. A detector
        output a GPU filter handled is a :class:`~edgefleet.sdk._sparse.CandidateRows`,
        :class:`~edgefleet.sdk._sparse.TopK`, :class:`~edgefleet.sdk._sparse.BoxCandidates` or
        :class:`~edgefleet.sdk._sparse.ConsumedOutput` instead (``np.asarray`` gives an array of the
        declared shape; :func:`~edgefleet.sdk._sparse.all_finite` checks one without building it)."""

    def filter_candidates(self, f: CandidateFilter) -> bool:
        """Cut output ``f.output`` down on the device from now on (see :class:`CandidateFilter`).
        False where this backend cannot: the default (CPU backends; TensorRT so far)."""
        return False

    def warmup(self, buffer: InputBuffer, n: int = 1, iterations: int = 3) -> float:
        """Run ``iterations`` inferences on the buffer's current contents; returns the mean ms of the runs
        after the first (the first pays for lazy initialisation)."""
        times = []
        for _ in range(max(1, iterations)):
            t0 = time.perf_counter()
            self.infer(buffer, n)
            times.append((time.perf_counter() - t0) * 1000.0)
        rest = times[1:] or times
        return sum(rest) / len(rest)

    def describe(self) -> str:
        """A short human description (backend, device, providers/precision)."""
        return f"{type(self).__name__} on {self.device}"

    @abstractmethod
    def close(self) -> None:
        """Release the model and its buffers. Safe to call twice."""


BACKENDS: Registry[BackendConfig] = Registry("backend", BackendConfig, BackendError, group="edgefleet.backends")

BackendFactory = Callable[[Any, str], Backend]
"""``factory(config, device) -> Backend``: built, not loaded (the pipeline calls ``load``)."""


def register_backend(
    key: str,
    config: type[BackendConfig],
    factory: BackendFactory,
    *,
    extra: str | None = None,
    replace: bool = False,
) -> None:
    """Make a backend available to pipeline configs as ``backend: {type: <key>, ...}`` (and to
    ``edgefleet run --backend <key>``).

    ``config``: its settings (a :class:`BackendConfig` with ``type: Literal["<key>"]``);
    ``factory(config, device)`` builds (not loads) it, ``device`` being ``cpu`` or ``cuda:N``;
    ``extra``: the pip extra that installs its library. The backend must pass the contract tests in
    ``tests/unit/sdk/test_backend_contract.py``.

    Example::

        class EchoConfig(BackendConfig):
            type: Literal["echo"] = "echo"

        register_backend("echo", EchoConfig, lambda config, device: EchoBackend(device))
    """
    BACKENDS.register(key, config, factory, extra=extra, replace=replace, origin="register_backend")


def create_backend(config: BackendConfig, device: str) -> Backend:
    """Build (not load) the backend a config selects."""
    backend = BACKENDS.build(config, device)
    if not isinstance(backend, Backend):
        raise BackendError(f"backend {config.type!r}: its factory returned a {type(backend).__name__}, not a Backend")
    return backend
