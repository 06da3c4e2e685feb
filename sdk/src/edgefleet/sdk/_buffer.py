"""The input buffer a backend owns and preprocessing writes into (shared by both, so it sits below them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["InputBuffer"]


@dataclass
class InputBuffer:
    """A preallocated input batch owned by a backend.

    ``array`` is where preprocessing writes, one row per frame: a host numpy array for CPU inference, or a
    device array (``__cuda_array_interface__``) for GPU backends. ``capacity`` rows exist.
    """

    array: Any
    capacity: int
    device: str = "cpu"
    handle: Any = None  # backend-private (bindings, device pointers)
