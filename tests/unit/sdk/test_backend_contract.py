"""The backend contract: what every inference backend must do, tested on a real model.

The tests take a loaded ``backend`` fixture; this module provides ONNX Runtime on the CPU, and
tests/gpu/test_backend_contract_gpu.py re-runs the same tests with ONNX Runtime CUDA and TensorRT
(wherever those import). Buffers are filled through the preprocessor for the buffer's device, so the
tests never assume host memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgefleet.sdk import BackendError, OnnxRuntimeConfig, load_package
from edgefleet.sdk._backends import Backend, InputBuffer, create_backend
from edgefleet.sdk._preprocess import make_preprocessor

KNOWN_DTYPES = {"float32", "float16", "uint8", "int8", "int32", "int64", "bool", "float64"}


@pytest.fixture
def backend(nanodet: Path) -> Iterator[Backend]:
    b = create_backend(OnnxRuntimeConfig(intra_op_threads=2), "cpu")
    b.load(nanodet / "model.onnx")
    yield b
    b.close()


def _frames(clip: Path, n: int) -> list[np.ndarray]:
    import cv2

    cap = cv2.VideoCapture(str(clip))
    out = []
    for _ in range(n):
        ok, img = cap.read()
        assert ok
        out.append(img)
    cap.release()
    return out


def _fill(backend: Backend, buf: InputBuffer, frames: list[np.ndarray], nanodet: Path) -> None:
    spec = load_package(nanodet, verify=False).manifest.input
    pre = make_preprocessor(spec, buf.device)
    for i, f in enumerate(frames):
        pre(f, buf, i)
    pre.finish(buf, len(frames))


def test_contract_describes_its_tensors(backend: Backend) -> None:
    assert len(backend.inputs) == 1
    assert len(backend.inputs[0].shape) == 4
    names = [o.name for o in backend.outputs]
    assert names and len(set(names)) == len(names)
    assert all(t.dtype in KNOWN_DTYPES for t in (*backend.inputs, *backend.outputs))
    assert backend.describe()


def test_contract_returns_exactly_n_finite_rows(backend: Backend, nanodet: Path, clip: Path) -> None:
    buf = backend.allocate_input(4)
    cap = buf.capacity
    assert cap >= 1
    frames = _frames(clip, cap)
    _fill(backend, buf, frames, nanodet)
    for n in sorted({1, cap, max(1, cap - 1)}):
        out = backend.infer(buf, n)
        assert set(out) == {o.name for o in backend.outputs}
        for name, value in out.items():
            assert isinstance(value, np.ndarray), name
            assert value.shape[0] == n, name
            assert np.isfinite(value).all(), name


def test_contract_batch_rows_match_single_runs(backend: Backend, nanodet: Path, clip: Path) -> None:
    buf = backend.allocate_input(3)
    frames = _frames(clip, buf.capacity)
    _fill(backend, buf, frames, nanodet)
    batched = backend.infer(buf, buf.capacity)
    for i, frame in enumerate(frames):
        single = backend.allocate_input(1)
        _fill(backend, single, [frame], nanodet)
        one = backend.infer(single, 1)
        for name in one:
            # GPU kernels are chosen per batch size (and the CUDA EP uses TF32): a few 1e-3 differences
            np.testing.assert_allclose(batched[name][i], one[name][0], atol=5e-3, rtol=1e-3)


def test_contract_is_deterministic_and_buffers_are_reusable(backend: Backend, nanodet: Path, clip: Path) -> None:
    buf = backend.allocate_input(1)
    _fill(backend, buf, _frames(clip, 1), nanodet)
    a = backend.infer(buf, 1)
    b = backend.infer(buf, 1)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], atol=1e-5)


def test_contract_warmup_reports_time(backend: Backend, nanodet: Path, clip: Path) -> None:
    buf = backend.allocate_input(1)
    _fill(backend, buf, _frames(clip, 1), nanodet)
    assert backend.warmup(buf, 1, iterations=2) > 0


def test_contract_close_is_idempotent_and_final(backend: Backend, nanodet: Path, clip: Path) -> None:
    buf = backend.allocate_input(1)
    _fill(backend, buf, _frames(clip, 1), nanodet)
    backend.close()
    backend.close()
    with pytest.raises(BackendError):
        backend.infer(buf, 1)


def test_contract_refuses_a_corrupt_model_with_a_clear_error(backend: Backend, tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07" + b"\xff" * 64)
    fresh = type(backend)(backend.config, backend.device)  # type: ignore[call-arg, attr-defined]
    with pytest.raises(BackendError, match=r"model\.onnx"):
        fresh.load(bad)
    with pytest.raises(BackendError, match="no such model file"):
        fresh.load(tmp_path / "missing.onnx")
