"""Frame memory for the GPU path: pinned host slots (one fast DMA per frame), mapped pinned slots on
integrated GPUs (Jetson: the GPU reads the slot where the decoder wrote it, no copy), and NV12 device
slots for NVDEC. Every allocation is made once per pool slot; a pinned block whose pool is gone waits in
:data:`PINNED_CACHE` for a pool of the same size, and is freed by its reaper, without stalling the GPU."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ._array import DeviceImage
from ._bindings import check, cudart, device_info, parse_device, use_device
from ._pinned_cache import PinnedCache

__all__ = [
    "PINNED_CACHE",
    "HostBlock",
    "device_image_allocator",
    "mapped_device_pointer",
    "pinned_allocator",
    "pinned_array",
]


def _free_host(ptr: int) -> None:
    cudart().cudaFreeHost(ptr)


#: pinned blocks of pools that are gone, kept for the next pool of their size (see ``_pinned_cache``)
PINNED_CACHE = PinnedCache(_free_host)


class HostBlock:
    """Page-locked host memory from ``cudaHostAlloc`` (or a cached block of the same size and kind);
    numpy arrays over it keep it alive (``base``); when the last goes, the block goes to
    :data:`PINNED_CACHE`."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, ordinal: int, mapped: bool) -> None:
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize
        self.mapped = mapped
        self.ordinal = ordinal
        cached = PINNED_CACHE.take(max(1, self.nbytes), mapped, ordinal)
        if cached is not None:
            self.ptr, self.device_ptr = cached
            return
        rt = cudart()
        use_device(ordinal)
        flags = rt.cudaHostAllocMapped if mapped else rt.cudaHostAllocDefault
        self.ptr = int(check(rt.cudaHostAlloc(max(1, self.nbytes), flags), f"cudaHostAlloc({self.nbytes})"))
        self.device_ptr = (
            int(check(rt.cudaHostGetDevicePointer(self.ptr, 0), "cudaHostGetDevicePointer")) if mapped else 0
        )

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3}

    def __del__(self, _cache: PinnedCache = PINNED_CACHE) -> None:
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            with contextlib.suppress(Exception):  # interpreter shutdown
                _cache.put(max(1, self.nbytes), self.mapped, self.ordinal, ptr, self.device_ptr)


def pinned_array(
    shape: tuple[int, ...], dtype: Any = np.uint8, *, ordinal: int = 0, mapped: bool = False
) -> np.ndarray:
    """A numpy array in pinned (optionally mapped) host memory (any dtype, structured ones too)."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dt.itemsize
    raw = np.asarray(HostBlock((nbytes,), np.uint8, ordinal, mapped))
    out: np.ndarray = raw.view(dt).reshape(shape)
    return out


def pinned_allocator(device: str, upload: bool = False) -> Callable[[tuple[int, ...]], np.ndarray]:
    """The frame-pool allocator for ``device``: mapped pinned slots, which the preprocessing kernel reads
    in place (on a discrete GPU across PCIe, only the pixels it samples; on an integrated one, Jetson,
    from the shared DRAM). ``upload`` on a discrete GPU: plain pinned slots, each frame uploaded whole."""
    ordinal = parse_device(device)
    mapped = device_info(ordinal).integrated or not upload

    def allocate(shape: tuple[int, ...]) -> np.ndarray:
        return pinned_array(shape, np.uint8, ordinal=ordinal, mapped=mapped)

    return allocate


def mapped_device_pointer(array: np.ndarray) -> int | None:
    """The device address of a host array in mapped pinned memory, or None (then it must be uploaded)."""
    base: Any = array
    while base is not None and not isinstance(base, HostBlock):
        base = getattr(base, "base", None)
    if base is None or not base.mapped:
        return None
    offset = int(array.ctypes.data) - base.ptr
    return int(base.device_ptr + offset)


def device_image_allocator(device: str, fmt: str = "NV12") -> Callable[[tuple[int, ...]], Any]:
    """A frame-pool allocator of device images: the pool's (H, W, 3) shape is the logical frame size."""
    ordinal = parse_device(device)

    def allocate(shape: tuple[int, ...]) -> DeviceImage:
        return DeviceImage.empty(int(shape[1]), int(shape[0]), fmt, ordinal)

    return allocate
