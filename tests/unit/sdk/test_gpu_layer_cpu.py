"""Parts of the GPU path that need no GPU: the DLPack bridge (on CPU tensors), the nvdec URI, the
TensorRT backend's missing-library error and engine cache key, and lazy imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgefleet.sdk import BackendUnavailableError, SourceError, TensorRTConfig
from edgefleet.sdk._cuda._array import from_dlpack, to_dlpack


def test_dlpack_export_is_consumed_by_numpy_without_copy() -> None:
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    class Exporter:
        def __dlpack__(self, **_: object) -> object:
            return to_dlpack(base.ctypes.data, base.shape, base.dtype, (1, 0), base)

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

    view = np.from_dlpack(Exporter())
    assert view.ctypes.data == base.ctypes.data
    np.testing.assert_array_equal(view, base)


def test_dlpack_import_reads_numpy_tensors() -> None:
    src = np.arange(10, dtype=np.uint8).reshape(2, 5)
    ptr, shape, dtype, device, owner = from_dlpack(src)
    assert ptr == src.ctypes.data and shape == (2, 5) and dtype == np.uint8 and device == (1, 0)
    del owner  # calls the producer's deleter


def test_unconsumed_dlpack_capsule_is_freed() -> None:
    from edgefleet.sdk._cuda import _array

    base = np.zeros(4, np.float32)
    before = len(_array._exports)
    cap = to_dlpack(base.ctypes.data, base.shape, base.dtype, (1, 0), base)
    assert len(_array._exports) == before + 1
    del cap
    assert len(_array._exports) == before


def test_nvdec_uri(tmp_path: Path) -> None:
    from edgefleet.sdk._sources import parse_source

    clip = tmp_path / "c.mp4"
    clip.write_bytes(b"x")
    spec = parse_source(f"cam=nvdec:{clip}?gpu=1&matrix=bt709")
    assert (spec.kind, spec.stream_id, spec.live, spec.uri) == ("nvdec", "cam", False, str(clip))
    assert spec.config is not None and spec.config.model_dump(exclude_unset=True) == {
        "type": "nvdec",
        "id": "cam",
        "path": clip,
        "gpu": 1,
        "matrix": "bt709",
    }
    with pytest.raises(SourceError):
        parse_source("nvdec:/no/such/clip.mp4")


def test_nvdec_prefetch_option_is_checked_before_anything_opens(tmp_path: Path) -> None:
    from edgefleet.sdk._sources import parse_source
    from edgefleet.sdk._sources._nvdec import NvdecSource

    clip = tmp_path / "c.mp4"
    clip.write_bytes(b"x")
    assert NvdecSource(parse_source(f"nvdec:{clip}")).prefetch == 0  # opt-in
    assert NvdecSource(parse_source(f"nvdec:{clip}?prefetch=4")).prefetch == 4
    for value in ("x", "-1", "65"):
        with pytest.raises(SourceError, match="prefetch"):
            NvdecSource(parse_source(f"nvdec:{clip}?prefetch={value}"))


def test_tensorrt_missing_names_what_to_install(nanodet: Path) -> None:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("tensorrt is installed here")
    from edgefleet.sdk._backends import create_backend

    backend = create_backend(TensorRTConfig(), "cuda:0")
    with pytest.raises(BackendUnavailableError, match="pip install tensorrt"):
        backend.load(nanodet / "model.onnx")


def test_pipeline_on_cuda_without_the_cuda_layer_says_so_before_loading_anything(
    nanodet: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One error naming what to install; no CPU-fallback warning from a backend first, no sink left open."""
    import importlib.util

    if importlib.util.find_spec("cuda") is not None:
        pytest.skip("cuda-python is installed here")
    from edgefleet.sdk import JsonlSink, Pipeline

    out = tmp_path / "results.jsonl"
    pipe = Pipeline(nanodet, sources=["synthetic:"], device="cuda:0", sinks=[JsonlSink(out)])
    with pytest.raises(BackendUnavailableError, match=r"pip install 'edgefleet-sdk\[cuda\]'"):
        pipe.start()
    assert not [r for r in caplog.records if "running on the CPU" in r.getMessage()]
    assert not out.exists(), "a sink was opened for a pipeline that cannot start"


def test_engine_cache_key_changes_with_every_input() -> None:
    from edgefleet.sdk._backends._tensorrt import engine_cache_key

    base = ("a" * 64, "NVIDIA H200 sm_90", "10.13.0", "fp16", (1, 16, 32))
    key = engine_cache_key(*base)
    for i, other in enumerate(("b" * 64, "Orin sm_87", "10.14.0", "int8", (1, 4, 8))):
        changed = list(base)
        changed[i] = other
        assert engine_cache_key(*changed) != key  # type: ignore[arg-type]


def test_cli_help_imports_no_cuda() -> None:
    code = (
        "import sys; from edgefleet.sdk._cli._app import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in sys.modules if m.startswith(('cuda', 'tensorrt', 'onnxruntime', 'PyNvVideoCodec'))"
        " or m.startswith('edgefleet.sdk._cuda')]\n"
        "print('LOADED', bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert "LOADED []" in out.stdout, out.stdout + out.stderr
