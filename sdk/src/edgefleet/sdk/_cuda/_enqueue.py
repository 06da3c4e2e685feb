"""Short asynchronous CUDA calls (kernel launches, copies into pinned or device memory, memsets) that
keep the GIL while they enqueue.

cuda-python releases the GIL around every call. For a call that only puts work on a stream (a few
microseconds) that can be a loss when the GIL is contended: at 64 NVDEC streams the pipeline's ~70
Python threads hold it most of the time (PyNvVideoCodec demuxes and decodes under it), and a thread
that lets it go after a call waits for it again behind them. On the H200 the inference loop's time per
batch was lower with its ~10 calls per batch made here, in every one of six pairs of cells (docs/gpu.md,
fourteenth session). Calls that wait (stream and event synchronisation, ONNX Runtime's run) still
release the GIL, as they must.

Used by the inference backend's output path (candidate filters, top k, GFL records) and the GPU
preprocessor. Not by the NVDEC source: with its per-frame copies held here, 64 paced streams were no
longer sustained in an earlier experiment (p95 164 and 200 ms against 38; ``h200-enqueue-experiment.json``),
so they stay on cuda-python.

Only calls that return at once belong here: never a copy to or from pageable host memory (the driver
may wait for it), never a synchronisation. Without the driver library (a CPU machine), without a
context current on the thread, or with :data:`ENABLED` off (the benchmarks compare both:
``tools/bench/gpu_bench.py --cuda-calls``) each function makes the same call through cuda-python.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, Literal

from ._bindings import CudaError, check, cudart, driver

__all__ = ["ENABLED", "copy", "copy_2d", "held", "launch", "memset"]

#: enqueue through the driver with the GIL held (False: through cuda-python, GIL released)
ENABLED = True

Kind = Literal["d2d", "d2h", "h2d"]

_HOST, _DEVICE = 1, 2  # CUmemorytype
_c = ctypes


class _Memcpy2D(ctypes.Structure):
    """``CUDA_MEMCPY2D`` (cuda.h)."""

    _fields_ = [
        ("srcXInBytes", _c.c_size_t),
        ("srcY", _c.c_size_t),
        ("srcMemoryType", _c.c_int),
        ("srcHost", _c.c_void_p),
        ("srcDevice", _c.c_uint64),
        ("srcArray", _c.c_void_p),
        ("srcPitch", _c.c_size_t),
        ("dstXInBytes", _c.c_size_t),
        ("dstY", _c.c_size_t),
        ("dstMemoryType", _c.c_int),
        ("dstHost", _c.c_void_p),
        ("dstDevice", _c.c_uint64),
        ("dstArray", _c.c_void_p),
        ("dstPitch", _c.c_size_t),
        ("WidthInBytes", _c.c_size_t),
        ("Height", _c.c_size_t),
    ]


@functools.cache
def _lib() -> Any:
    """The driver library with the GIL-keeping entry points typed, or None where it cannot be loaded."""
    try:
        lib = ctypes.PyDLL("libcuda.so.1")
    except OSError:
        return None
    vp, sz, u32, u64 = _c.c_void_p, _c.c_size_t, _c.c_uint, _c.c_uint64
    signatures: dict[str, list[Any]] = {
        "cuLaunchKernel": [vp, u32, u32, u32, u32, u32, u32, u32, vp, _c.POINTER(vp), vp],
        "cuMemcpyDtoDAsync_v2": [u64, u64, sz, vp],
        "cuMemcpyDtoHAsync_v2": [vp, u64, sz, vp],
        "cuMemcpyHtoDAsync_v2": [u64, vp, sz, vp],
        "cuMemcpy2DAsync_v2": [_c.POINTER(_Memcpy2D), vp],
        "cuMemsetD8Async": [u64, _c.c_ubyte, sz, vp],
        "cuGetErrorName": [_c.c_int, _c.POINTER(_c.c_char_p)],
        "cuCtxGetCurrent": [_c.POINTER(vp)],
    }
    try:
        for name, args in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, _c.c_int
    except AttributeError:
        return None
    return lib


def held() -> bool:
    """Whether this thread's calls go through the driver with the GIL held: enabled, the driver loaded,
    and a context current on the thread (the runtime makes one current on a thread's first call; until
    then the calls go through it)."""
    if not ENABLED:
        return False
    lib = _lib()
    if lib is None:
        return False
    ctx = _c.c_void_p()
    return lib.cuCtxGetCurrent(_c.byref(ctx)) == 0 and bool(ctx.value)


def _check(err: int, what: str) -> None:
    if err == 0:
        return
    name = _c.c_char_p()
    _lib().cuGetErrorName(err, _c.byref(name))
    raise CudaError(f"{what} failed: {(name.value or b'CUDA error %d' % err).decode()}")


def _runtime_kind(kind: Kind) -> Any:
    names = {"d2d": "cudaMemcpyDeviceToDevice", "d2h": "cudaMemcpyDeviceToHost", "h2d": "cudaMemcpyHostToDevice"}
    return getattr(cudart().cudaMemcpyKind, names[kind])


def _handle(stream: Any) -> int:
    return int(stream) if stream is not None else 0


def launch(
    function: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: list[tuple[Any, Any]],
    stream: Any,
    shared_bytes: int = 0,
    what: str = "cuLaunchKernel",
) -> None:
    """Launch ``function`` (a cuda-python ``CUfunction``) with (value, ctypes type) arguments."""
    if not held():
        drv = driver()
        values = tuple(v for v, _ in args)
        types = tuple(t for _, t in args)
        s = drv.CUstream(_handle(stream))
        check(drv.cuLaunchKernel(function, *grid, *block, shared_bytes, s, (values, types), 0), what)
        return
    boxed = [t(v) for v, t in args]
    params = (_c.c_void_p * max(1, len(boxed)))(*[_c.addressof(b) for b in boxed])
    err = _lib().cuLaunchKernel(int(function), *grid, *block, shared_bytes, _handle(stream), params, None)
    _check(err, what)


def copy(dst: int, src: int, nbytes: int, kind: Kind, stream: Any, what: str = "cudaMemcpyAsync") -> None:
    """Copy ``nbytes``; a host side must be pinned memory."""
    if not held():
        check(cudart().cudaMemcpyAsync(dst, src, nbytes, _runtime_kind(kind), stream), what)
        return
    lib, s = _lib(), _handle(stream)
    if kind == "d2d":
        err = lib.cuMemcpyDtoDAsync_v2(dst, src, nbytes, s)
    elif kind == "d2h":
        err = lib.cuMemcpyDtoHAsync_v2(dst, src, nbytes, s)
    else:
        err = lib.cuMemcpyHtoDAsync_v2(dst, src, nbytes, s)
    _check(err, what)


def copy_2d(
    dst: int,
    dst_pitch: int,
    src: int,
    src_pitch: int,
    width: int,
    height: int,
    kind: Kind,
    stream: Any,
    what: str = "cudaMemcpy2DAsync",
) -> None:
    """Copy ``height`` rows of ``width`` bytes between pitched buffers; a host side must be pinned."""
    if not held():
        rt = cudart()
        check(rt.cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, _runtime_kind(kind), stream), what)
        return
    p = _Memcpy2D()
    p.srcPitch, p.dstPitch, p.WidthInBytes, p.Height = src_pitch, dst_pitch, width, height
    if kind == "h2d":
        p.srcMemoryType, p.srcHost = _HOST, src
    else:
        p.srcMemoryType, p.srcDevice = _DEVICE, src
    if kind == "d2h":
        p.dstMemoryType, p.dstHost = _HOST, dst
    else:
        p.dstMemoryType, p.dstDevice = _DEVICE, dst
    _check(_lib().cuMemcpy2DAsync_v2(_c.byref(p), _handle(stream)), what)


def memset(ptr: int, value: int, nbytes: int, stream: Any, what: str = "cudaMemsetAsync") -> None:
    """Set ``nbytes`` of device memory to the byte ``value``."""
    if not held():
        check(cudart().cudaMemsetAsync(ptr, value, nbytes, stream), what)
        return
    _check(_lib().cuMemsetD8Async(ptr, value, nbytes, _handle(stream)), what)
