"""Backend ``example-numpy``: runs the one operation a ``model.json`` names, in NumPy (no ONNX)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np

from edgefleet.sdk import Backend, BackendConfig, BackendError, InputBuffer, TensorSpec, register_backend


class NumpyConfig(BackendConfig):
    type: Literal["example-numpy"] = "example-numpy"


class NumpyBackend(Backend):
    """``model.json``: ``{"op": "mean", "input": {name, shape, dtype}, "output": {name, shape}}``; the
    output is each row's mean over every input value."""

    concurrent_infer = True

    def __init__(self, config: NumpyConfig, device: str) -> None:
        if device != "cpu":
            raise BackendError(f"the example-numpy backend runs on the CPU, not {device}")
        super().__init__(device)
        self.batches = 0

    def load(self, model_path: Path) -> None:
        try:
            model = json.loads(model_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BackendError(f"{model_path}: not an example-numpy model: {exc}") from None
        if model.get("op") != "mean":
            raise BackendError(f"{model_path}: op must be mean, got {model.get('op')!r}")
        i, o = model["input"], model["output"]
        self.inputs = (TensorSpec(i["name"], tuple(i["shape"]), i.get("dtype", "float32")),)
        self.outputs = (TensorSpec(o["name"], tuple(o["shape"]), "float32"),)

    def allocate_input(self, batch: int) -> InputBuffer:
        shape = self.input_shape or self.inputs[0].shape
        return InputBuffer(np.zeros((batch, *shape[1:]), np.dtype(self.inputs[0].dtype)), batch)

    def infer(self, buffer: InputBuffer, n: int) -> dict[str, np.ndarray]:
        self.batches += 1
        rows = np.asarray(buffer.array[:n], np.float32).reshape(n, -1)
        return {self.outputs[0].name: rows.mean(axis=1, keepdims=True)}

    def describe(self) -> str:
        return "example-numpy on cpu"

    def close(self) -> None:
        pass


def register() -> None:
    register_backend("example-numpy", NumpyConfig, NumpyBackend)
