"""Run-time compilation of ``_kernels.cu`` with NVRTC: once per process and device, cached.

The source is compiled to the device's own machine code (``sm_XY`` cubin); where this NVRTC does not
know the architecture yet, to PTX for the newest one it knows, which the driver compiles at load.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from importlib import resources
from typing import Any

from .._errors import BackendUnavailableError
from . import _enqueue as enqueue
from ._bindings import CudaError, check, device_info, driver, use_device

__all__ = ["Kernel", "kernel"]

_lock = threading.Lock()


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise BackendUnavailableError(
            "GPU preprocessing needs cuda-python with NVRTC: pip install 'edgefleet-sdk[cuda]'"
        ) from exc
    return nvrtc


def _compile(source: bytes, arch: str, major: int, minor: int) -> tuple[bytes, bool]:
    """(image, is_cubin)."""
    nvrtc = _nvrtc()
    prog = check(nvrtc.nvrtcCreateProgram(source, b"edgefleet_kernels.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        for target, cubin in (
            (f"--gpu-architecture=sm_{major}{minor}", True),
            ("--gpu-architecture=compute_75", False),
        ):
            opts = [target.encode(), b"--std=c++17", b"-default-device", b"--use_fast_math"]
            err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
            if int(err) == 0:
                if cubin:
                    size = check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
                    buf = b" " * size
                    check(nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
                else:
                    size = check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
                    buf = b" " * size
                    check(nvrtc.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
                return buf, cubin
            size = check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            text = log.decode(errors="replace")
            if "invalid value for --gpu-architecture" not in text and "-arch" not in text:
                raise CudaError(f"NVRTC could not compile the edgefleet kernels for {arch}:\n{text}")
        raise CudaError(f"NVRTC knows neither {arch} nor compute_75")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


class Kernel:
    """A loaded kernel function; :meth:`launch` takes (value, ctypes type) pairs."""

    def __init__(self, function: Any, name: str) -> None:
        self._fn = function
        self.name = name

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: list[tuple[Any, Any]],
        stream: int,
        shared_bytes: int = 0,
    ) -> None:
        enqueue.launch(self._fn, grid, block, args, stream, shared_bytes, f"cuLaunchKernel({self.name})")


@functools.cache
def _module(ordinal: int) -> Any:
    info = device_info(ordinal)
    source = resources.files(__package__).joinpath("_kernels.cu").read_bytes()
    image, _ = _compile(source, info.arch, info.major, info.minor)
    use_device(ordinal)
    drv = driver()
    return check(drv.cuModuleLoadData(image), "cuModuleLoadData")


_kernels: dict[tuple[str, int], Kernel] = {}


def kernel(name: str, ordinal: int) -> Kernel:
    """The named kernel on device ``ordinal`` (compiles the module on first use, looks the function up
    once; thread-safe)."""
    found = _kernels.get((name, ordinal))
    if found is not None:
        return found
    with _lock:
        module = _module(ordinal)
        fn = check(driver().cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")
        found = _kernels[(name, ordinal)] = Kernel(fn, name)
    return found


# ctypes aliases for launch arguments
PTR = ctypes.c_void_p
I32 = ctypes.c_int
I64 = ctypes.c_longlong
F32 = ctypes.c_float
