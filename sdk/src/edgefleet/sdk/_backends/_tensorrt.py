"""TensorRT backend (TensorRT >= 10 Python API).

Named I/O tensors, ``set_tensor_address`` on device buffers, ``execute_async_v3`` on this backend's CUDA
stream, one optimisation profile covering batch 1..max for dynamic-batch models. Engines are built from
the ONNX on the device (FP32 / FP16 / INT8 from a calibration cache or an explicitly quantized Q/DQ
model, with a persistent timing cache) and cached under a key of ONNX sha256 + GPU (or Jetson SoC) +
TensorRT version + precision + batch range, so a second start loads in seconds. A serialized engine
(``.engine``/``.plan``) loads as is.

Not run on hardware in this project's CI or benchmarks (TensorRT could not be installed there): the
code follows NVIDIA's TensorRT 10 API documentation and runs the shared backend contract tests wherever
``tensorrt`` imports.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import BackendError, BackendUnavailableError
from ._base import Backend, InputBuffer, TensorSpec
from ._configs import TensorRTConfig

__all__ = ["TensorRTBackend", "engine_cache_key"]

_log = logging.getLogger(__name__)
_INSTALL = (
    "the tensorrt backend needs TensorRT >= 10: on x86 `pip install tensorrt` (NVIDIA's wheels); on "
    "Jetson use JetPack's python3-libnvinfer. It also needs `edgefleet-sdk[cuda]` (cuda-python)."
)
_build_lock = threading.Lock()


def _trt() -> Any:
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise BackendUnavailableError(_INSTALL) from exc
    major = int(str(trt.__version__).split(".")[0])
    if major < 10:
        raise BackendUnavailableError(f"TensorRT {trt.__version__} is too old; {_INSTALL}")
    return trt


def _soc() -> str | None:
    """The Jetson module (device-tree model) where there is one."""
    try:
        return Path("/proc/device-tree/model").read_text(encoding="utf-8", errors="replace").strip("\x00 \n")
    except OSError:
        return None


def engine_cache_key(onnx_sha256: str, gpu: str, trt_version: str, precision: str, batch: tuple[int, int, int]) -> str:
    """The engine file name for a model on this target: anything that changes the engine changes the key."""
    text = "|".join([onnx_sha256, gpu, trt_version, precision, "x".join(map(str, batch))])
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    return f"{onnx_sha256[:16]}-{precision}-b{batch[2]}-{digest}.engine"


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgefleet" / "engines"


class _Progress:
    """Adapts TensorRT's IProgressMonitor to log lines (and an optional callback)."""

    @staticmethod
    def make(trt: Any, callback: Any) -> Any:
        class Monitor(trt.IProgressMonitor):  # type: ignore[misc]
            def __init__(self) -> None:
                trt.IProgressMonitor.__init__(self)
                self.steps: dict[str, int] = {}

            def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
                self.steps[phase_name] = num_steps
                if parent_phase is None:
                    _log.info("TensorRT build: %s (%d steps)", phase_name, num_steps)
                if callback is not None:
                    callback(phase_name, 0, num_steps)

            def step_complete(self, phase_name: str, step: int) -> bool:
                if callback is not None:
                    callback(phase_name, step + 1, self.steps.get(phase_name, 0))
                return True  # False would cancel the build

            def phase_finish(self, phase_name: str) -> None:
                self.steps.pop(phase_name, None)

        return Monitor()


class _Calibrator:
    """INT8 from an existing calibration cache only (calibration itself runs offline, not on the hot path)."""

    @staticmethod
    def make(trt: Any, cache: Path) -> Any:
        data = cache.read_bytes()

        class CacheCalibrator(trt.IInt8EntropyCalibrator2):  # type: ignore[misc]
            def __init__(self) -> None:
                trt.IInt8EntropyCalibrator2.__init__(self)

            def get_batch_size(self) -> int:
                return 1

            def get_batch(self, names: list[str]) -> None:
                return None  # no data: everything comes from the cache

            def read_calibration_cache(self) -> bytes:
                return data

            def write_calibration_cache(self, cache: bytes) -> None:
                return None

        return CacheCalibrator()


class TensorRTBackend(Backend):
    def __init__(self, config: TensorRTConfig | None = None, device: str = "cuda:0") -> None:
        super().__init__(device)
        self.config = config or TensorRTConfig.model_validate({})
        if not device.startswith("cuda"):
            raise BackendError(f"the tensorrt backend runs on cuda:N, not {device}")
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._ordinal = 0
        self.max_batch = 32
        self.engine_path: Path | None = None
        self.build_ms = 0.0
        self.progress: Any = None  # optional callable(phase, step, steps) during a build
        self._out_bufs: dict[int, dict[str, Any]] = {}

    # --- building / loading -------------------------------------------------------------------------
    def _target(self) -> str:
        from .._cuda._bindings import device_info

        info = device_info(self._ordinal)
        return f"{info.name} {info.arch}" + (f" {_soc()}" if info.integrated and _soc() else "")

    def _batch_range(self, network: Any) -> tuple[int, int, int]:
        batch = int(network.get_input(0).shape[0])
        if batch > 0:
            return (batch, batch, batch)
        top = max(1, self.max_batch)
        return (1, max(1, top // 2), top)

    def _build(self, trt: Any, onnx_path: Path, logger: Any) -> bytes:
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(onnx_path.read_bytes(), str(onnx_path.parent)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise BackendError(f"{onnx_path}: TensorRT cannot parse this ONNX: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.config.workspace_mb << 20)
        precision = self.config.precision
        if precision in ("fp16", "int8") and builder.platform_has_fast_fp16:
            config.set_flag(trt.BuilderFlag.FP16)
        if precision == "int8":
            config.set_flag(trt.BuilderFlag.INT8)
            if self.config.int8_calibration_cache is not None:
                config.int8_calibrator = _Calibrator.make(trt, self.config.int8_calibration_cache)
            # else: an explicitly quantized (Q/DQ) model carries its own scales
        batch = self._batch_range(network)
        profile = builder.create_optimization_profile()
        for i in range(network.num_inputs):
            t = network.get_input(i)
            dims = tuple(int(d) for d in t.shape)
            if any(d < 0 for d in dims[1:]):
                raise BackendError(f"{onnx_path}: input {t.name} has dynamic spatial dims {dims}")
            profile.set_shape(t.name, (batch[0], *dims[1:]), (batch[1], *dims[1:]), (batch[2], *dims[1:]))
        config.add_optimization_profile(profile)
        timing_path = self._cache_dir() / f"timing-{self._target_slug()}.cache"
        if self.config.timing_cache:
            blob = timing_path.read_bytes() if timing_path.is_file() else b""
            config.set_timing_cache(config.create_timing_cache(blob), False)
        config.progress_monitor = _Progress.make(trt, self.progress)
        t0 = time.perf_counter()
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise BackendError(f"{onnx_path}: TensorRT could not build an engine (see its log above)")
        self.build_ms = (time.perf_counter() - t0) * 1000.0
        if self.config.timing_cache:
            _atomic_write(timing_path, bytes(memoryview(config.get_timing_cache().serialize())))
        return bytes(memoryview(serialized))

    def _cache_dir(self) -> Path:
        d = self.config.cache_dir or _default_cache()
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _target_slug(self) -> str:
        return hashlib.sha256(self._target().encode()).hexdigest()[:12]

    def load(self, model_path: Path) -> None:
        trt = _trt()
        from .._cuda._bindings import Stream, parse_device, use_device

        if not model_path.is_file():
            raise BackendError(f"{model_path}: no such model file")
        self._ordinal = parse_device(self.device)
        use_device(self._ordinal)
        self._stream = Stream(self._ordinal)
        logger = trt.Logger(trt.Logger.WARNING)
        if model_path.suffix in (".engine", ".plan", ".trt"):
            blob = model_path.read_bytes()
            self.engine_path = model_path
        else:
            blob = self._cached_or_build(trt, model_path, logger)
        runtime = trt.Runtime(logger)
        self._engine = runtime.deserialize_cuda_engine(blob)
        if self._engine is None:
            raise BackendError(f"{model_path}: TensorRT cannot deserialize the engine (built elsewhere?)")
        self._context = self._engine.create_execution_context()
        ins: list[TensorSpec] = []
        outs: list[TensorSpec] = []
        for i in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(i)
            dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name))).name
            spec = TensorSpec(name, tuple(int(d) for d in self._engine.get_tensor_shape(name)), dtype)
            (ins if self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outs).append(spec)
        if len(ins) != 1:
            raise BackendError(f"{model_path}: expected one image input, the engine has {len(ins)}")
        self.inputs, self.outputs = tuple(ins), tuple(outs)
        if self.inputs[0].shape[0] < 0:
            _, _, top = self._engine.get_tensor_profile_shape(self.inputs[0].name, 0)
            self.max_batch = int(top[0])

    def _cached_or_build(self, trt: Any, onnx_path: Path, logger: Any) -> bytes:
        key = engine_cache_key(
            _file_sha256(onnx_path),
            self._target(),
            str(trt.__version__),
            self.config.precision,
            (1, max(1, self.max_batch // 2), self.max_batch),
        )
        path = self._cache_dir() / key
        self.engine_path = path
        with _build_lock:  # one build per process at a time; loads of cached engines are cheap
            if path.is_file():
                _log.info("TensorRT engine from cache: %s", path)
                return path.read_bytes()
            _log.info(
                "building a TensorRT %s engine for %s (first use on this target)",
                self.config.precision,
                onnx_path,
            )
            blob = self._build(trt, onnx_path, logger)
            _atomic_write(path, blob)
            _log.info("TensorRT engine built in %.1f s: %s", self.build_ms / 1000.0, path)
            return blob

    # --- buffers and inference ----------------------------------------------------------------------
    def allocate_input(self, batch: int) -> InputBuffer:
        from .._cuda._array import DeviceArray

        spec = self.inputs[0]
        rows = self.fixed_batch or min(batch, self.max_batch)
        dims = (self.input_shape or spec.shape)[1:]
        arr = DeviceArray.zeros((rows, *dims), spec.dtype, self._ordinal)
        outs: dict[str, Any] = {}
        for o in self.outputs:
            odims = tuple(d if d > 0 else 1 for d in o.shape[1:])
            if any(d < 0 for d in o.shape[1:]):
                raise BackendError(f"output {o.name} has a data-dependent shape {o.shape}: not supported")
            outs[o.name] = DeviceArray.empty((rows, *odims), o.dtype, self._ordinal)
        return InputBuffer(array=arr, capacity=rows, device=f"cuda:{self._ordinal}", handle=outs)

    def infer(self, buffer: InputBuffer, n: int) -> dict[str, np.ndarray]:
        from .._cuda._array import as_device_array
        from .._cuda._bindings import check, cudart, use_device
        from .._cuda._nvtx import nvtx_range

        if self._context is None:
            raise BackendError("backend is closed")
        if not 0 < n <= buffer.capacity:
            raise BackendError(f"cannot run {n} rows from a buffer of {buffer.capacity}")
        use_device(self._ordinal)
        rows = self.fixed_batch or n
        ctx = self._context
        inp = as_device_array(buffer.array)
        spec = self.inputs[0]
        ctx.set_input_shape(spec.name, (rows, *inp.shape[1:]))
        ctx.set_tensor_address(spec.name, inp.ptr)
        outs = buffer.handle
        if not isinstance(outs, dict):
            raise BackendError("this input buffer was not allocated by this backend")
        for name, arr in outs.items():
            ctx.set_tensor_address(name, arr.ptr)
        with nvtx_range("infer.tensorrt"):
            if not ctx.execute_async_v3(self._stream.handle):
                raise BackendError("TensorRT execute_async_v3 failed (see its log)")
        rt = cudart()
        d2h = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        result: dict[str, np.ndarray] = {}
        for name, arr in outs.items():
            host = np.empty((n, *arr.shape[1:]), arr.dtype)
            check(rt.cudaMemcpyAsync(host.ctypes.data, arr.ptr, host.nbytes, d2h, self._stream.raw), "D2H")
            result[name] = host
        self._stream.synchronize()
        return result

    def describe(self) -> str:
        return f"tensorrt {self.config.precision} on {self.device}"

    def close(self) -> None:
        self._context = None
        self._engine = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
