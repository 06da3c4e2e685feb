"""GPU tests: every test here is marked ``gpu`` and skips itself where no CUDA GPU (or cuda-python,
or onnxruntime-gpu, or PyNvVideoCodec, or TensorRT) is found."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def _gpu_reason() -> str | None:
    try:
        from edgefleet.sdk._cuda._bindings import device_count

        if device_count() < 1:
            return "no CUDA device visible"
    except Exception as exc:  # cuda-python missing, no driver, ...
        return f"no usable CUDA here ({type(exc).__name__}: {exc})"
    return None


@pytest.fixture(scope="session")
def gpu() -> str:
    reason = _gpu_reason()
    if reason:
        pytest.skip(reason)
    return "cuda:0"


@pytest.fixture(scope="session")
def ort_cuda(gpu: str) -> str:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)")
    return gpu


@pytest.fixture(scope="session")
def nvdec(gpu: str) -> str:
    try:
        import PyNvVideoCodec  # noqa: F401
    except Exception as exc:
        pytest.skip(f"PyNvVideoCodec unavailable: {exc}")
    return gpu
