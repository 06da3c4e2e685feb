"""The shared backend contract, run on the GPU backends: ONNX Runtime CUDA and TensorRT.

The contract's tests live beside the CPU backend's (tests/unit/.../test_backend_contract.py, with a
``backend`` fixture); this module re-runs them with GPU parametrisations, and adds the basic lifecycle
checks so the GPU backends are covered even where the shared module is absent."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgefleet.sdk import OnnxRuntimeConfig, TensorRTConfig
from edgefleet.sdk._backends import Backend, create_backend

pytestmark = pytest.mark.gpu

for _name in ("tests.unit.sdk.test_backend_contract", "tests.unit.test_backend_contract"):
    try:
        _shared = importlib.import_module(_name)
    except ImportError:
        continue
    for _attr in dir(_shared):
        if _attr.startswith("test_"):
            globals()[_attr] = getattr(_shared, _attr)
    break


def _make(kind: str, device: str) -> Backend:
    if kind == "ort-cuda":
        ort = pytest.importorskip("onnxruntime")
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            pytest.skip("no CUDAExecutionProvider")
        return create_backend(OnnxRuntimeConfig(), device)
    pytest.importorskip("tensorrt")
    return create_backend(TensorRTConfig(precision="fp32"), device)


@pytest.fixture(params=["ort-cuda", "tensorrt"])
def backend(request: pytest.FixtureRequest, gpu: str, nanodet: Path) -> Iterator[Backend]:
    b = _make(request.param, gpu)
    b.load(nanodet / "model.onnx")
    yield b
    b.close()


def test_gpu_backend_lifecycle(backend: Backend) -> None:
    from edgefleet.sdk._cuda._array import as_device_array

    assert backend.inputs[0].name == "image"
    buf = backend.allocate_input(4)
    assert buf.device.startswith("cuda") and buf.capacity == 4
    dev = as_device_array(buf.array)
    dev.copy_from_host(np.random.default_rng(0).standard_normal(dev.shape).astype(dev.dtype))
    for n in (1, 4, 2):
        out = backend.infer(buf, n)
        assert set(out) == {o.name for o in backend.outputs}
        assert all(v.shape[0] == n and np.isfinite(v).all() for v in out.values())
    assert backend.warmup(buf, 2) > 0
    backend.close()
    backend.close()  # twice is fine


def test_gpu_backend_unknown_buffer_refused(backend: Backend) -> None:
    from edgefleet.sdk import BackendError
    from edgefleet.sdk._backends import InputBuffer

    foreign: Any = InputBuffer(array=np.zeros((1, 3, 416, 416), np.float32), capacity=1, device="cuda:0")
    with pytest.raises(BackendError):
        backend.infer(foreign, 1)
