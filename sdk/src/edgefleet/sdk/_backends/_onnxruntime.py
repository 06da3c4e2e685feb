"""ONNX Runtime backend: CPU here; CUDA / TensorRT execution providers where installed."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .._config import OnnxRuntimeConfig
from .._errors import BackendError, BackendUnavailableError
from ._base import Backend, InputBuffer, TensorSpec

__all__ = ["OnnxRuntimeBackend"]

_log = logging.getLogger(__name__)
_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(uint8)": "uint8",
    "tensor(int8)": "int8",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(bool)": "bool",
    "tensor(double)": "float64",
}


def _ort() -> Any:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise BackendUnavailableError(
            "the onnxruntime backend needs ONNX Runtime: pip install 'edgefleet-sdk[cpu]' "
            "(or 'edgefleet-sdk[cuda]' for onnxruntime-gpu)"
        ) from exc
    return ort


def _shape(raw: Any) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) and d > 0 else -1 for d in raw)


class OnnxRuntimeBackend(Backend):
    kind = "onnxruntime"
    extra = "cpu"

    def __init__(self, config: OnnxRuntimeConfig | None = None, device: str = "cpu") -> None:
        super().__init__(device)
        self.config = config or OnnxRuntimeConfig()
        self._session: Any = None
        self.providers: list[str] = []

    def _providers(self, ort: Any) -> list[Any]:
        available = set(ort.get_available_providers())
        if self.config.providers:
            wanted = list(self.config.providers)
        elif self.device.startswith("cuda"):
            wanted = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
        else:
            wanted = ["CPUExecutionProvider"]
        chosen: list[Any] = []
        device_id = int(self.device.split(":")[1]) if ":" in self.device else 0
        for name in wanted:
            if name not in available:
                continue
            if name == "CUDAExecutionProvider":
                chosen.append((name, {"device_id": device_id, "cudnn_conv_algo_search": "HEURISTIC"}))
            elif name == "TensorrtExecutionProvider":
                chosen.append(
                    (
                        name,
                        {
                            "device_id": device_id,
                            "trt_fp16_enable": self.config.fp16,
                            "trt_engine_cache_enable": True,
                        },
                    )
                )
            else:
                chosen.append(name)
        if self.device.startswith("cuda") and not any(
            (p[0] if isinstance(p, tuple) else p) in {"CUDAExecutionProvider", "TensorrtExecutionProvider"}
            for p in chosen
        ):
            _log.warning(
                "device %s asked for, but this onnxruntime has no CUDA or TensorRT provider "
                "(install edgefleet-sdk[cuda]); running on the CPU",
                self.device,
            )
        if not chosen:
            chosen = ["CPUExecutionProvider"]
        return chosen

    def load(self, model_path: Path) -> None:
        ort = _ort()
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        if self.config.intra_op_threads:
            opts.intra_op_num_threads = self.config.intra_op_threads
        if not model_path.is_file():
            raise BackendError(f"{model_path}: no such model file")
        try:
            self._session = ort.InferenceSession(
                str(model_path), sess_options=opts, providers=self._providers(ort)
            )
        except Exception as exc:  # ORT raises its own pybind exception types
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BackendError(f"{model_path}: ONNX Runtime cannot load this model: {msg}") from None
        self.providers = list(self._session.get_providers())
        self.inputs = tuple(
            TensorSpec(i.name, _shape(i.shape), _DTYPES.get(i.type, i.type))
            for i in self._session.get_inputs()
        )
        self.outputs = tuple(
            TensorSpec(o.name, _shape(o.shape), _DTYPES.get(o.type, o.type))
            for o in self._session.get_outputs()
        )
        if len(self.inputs) != 1:
            raise BackendError(f"{model_path}: expected one image input, the model has {len(self.inputs)}")
        self._output_names = [o.name for o in self.outputs]

    def allocate_input(self, batch: int) -> InputBuffer:
        spec = self.inputs[0]
        rows = self.fixed_batch or batch
        dims = (self.input_shape or spec.shape)[1:]
        if any(d <= 0 for d in dims):
            raise BackendError(
                f"input {spec.name} has dynamic dimensions {list(spec.shape)}; "
                "the manifest's input shape must fix every dimension but the batch"
            )
        shape = (rows, *dims)
        return InputBuffer(array=np.zeros(shape, dtype=spec.dtype), capacity=rows, device="cpu")

    def infer(self, buffer: InputBuffer, n: int) -> dict[str, np.ndarray]:
        if self._session is None:
            raise BackendError("backend is closed")
        rows = self.fixed_batch or n
        feed = {self.inputs[0].name: buffer.array[:rows]}
        try:
            values = self._session.run(self._output_names, feed)
        except Exception as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BackendError(f"ONNX Runtime inference failed: {msg}") from None
        return {name: np.asarray(v)[:n] for name, v in zip(self._output_names, values, strict=True)}

    def describe(self) -> str:
        return f"onnxruntime on {self.device} ({', '.join(self.providers)})"

    def close(self) -> None:
        self._session = None
