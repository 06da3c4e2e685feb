"""Device arrays and device images, with zero-copy interop both ways.

``DeviceArray`` is a typed view of device memory (pointer, shape, dtype) that exports
``__cuda_array_interface__`` (v3) and DLPack (``__dlpack__``/``__dlpack_device__``), so CuPy, PyTorch,
Numba or pycuda take it without a copy; :func:`as_device_array` goes the other way, wrapping any object
that exports either protocol. ``DeviceImage`` is a video frame on the device (packed BGR/RGB or NV12),
what the NVDEC source produces and the fused preprocessing kernel reads.

The DLPack bridge is written with ctypes against the stable C ABI of DLPack 0.x (``dltensor``
capsules), so it needs no CuPy or PyTorch and is tested on CPU arrays too.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from typing import Any

import numpy as np

from .._errors import BackendError
from ._bindings import check, cudart, use_device

__all__ = ["DeviceAllocation", "DeviceArray", "DeviceImage", "as_device_array", "from_dlpack", "to_dlpack"]

# --- DLPack C ABI ----------------------------------------------------------------------------------
_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13
_DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}  # kDLInt, kDLUInt, kDLFloat, kDLBool


class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class _DLDataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class _DLTensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


class _DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = (
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _Deleter),
)

_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor)
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = (ctypes.py_object, ctypes.c_char_p)

_NAME = b"dltensor"  # module-lifetime bytes: a capsule keeps a pointer to its name
_USED = b"used_dltensor"
_exports: dict[int, tuple[Any, ...]] = {}  # manager_ctx → what a live export keeps alive


def _release_export(managed: Any) -> None:
    _exports.pop(int(managed.contents.manager_ctx or 0), None)


_DELETER = _Deleter(_release_export)


def _capsule_destructor(capsule: int) -> None:
    # Called when the capsule dies. If no consumer took it (name still "dltensor"), free the export.
    if _api.PyCapsule_IsValid(capsule, _NAME):
        ptr = _api.PyCapsule_GetPointer(capsule, _NAME)
        managed = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor))
        _release_export(managed)


_DESTRUCTOR = _CapsuleDestructor(_capsule_destructor)


def to_dlpack(ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any], device: tuple[int, int], owner: Any) -> Any:
    """A legacy (0.x) DLPack capsule over memory that ``owner`` keeps alive until the consumer is done."""
    code = _DL_CODES.get(dtype.kind)
    if code is None:
        raise BackendError(f"dtype {dtype} cannot be exported through DLPack")
    managed = _DLManagedTensor()
    shape_arr = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    t = managed.dl_tensor
    t.data = ptr
    t.device = _DLDevice(device[0], device[1])
    t.ndim = len(shape)
    t.dtype = _DLDataType(code, dtype.itemsize * 8, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.POINTER(ctypes.c_int64)()  # NULL: compact row-major
    t.byte_offset = 0
    key = ctypes.addressof(managed)
    managed.manager_ctx = key
    managed.deleter = _DELETER
    _exports[key] = (managed, shape_arr, owner)
    return _api.PyCapsule_New(key, _NAME, _DESTRUCTOR)


class _DLPackOwner:
    """Keeps an imported DLPack tensor alive; calls the producer's deleter when collected."""

    def __init__(self, capsule: Any, managed: Any) -> None:
        self._capsule = capsule
        self._managed = managed

    def __del__(self) -> None:
        managed, self._managed = self._managed, None
        if managed is not None and managed.contents.deleter:
            managed.contents.deleter(managed)


def from_dlpack(obj: Any) -> tuple[int, tuple[int, ...], np.dtype[Any], tuple[int, int], Any]:
    """Consume ``obj.__dlpack__()``: (pointer, shape, dtype, (device_type, device_id), owner).

    Only compact row-major tensors are accepted (what preprocessing and bindings need)."""
    capsule = obj.__dlpack__()
    ptr = _api.PyCapsule_GetPointer(id(capsule), _NAME)  # raises ValueError for another capsule kind
    if not ptr:
        raise BackendError("the object's __dlpack__ did not return a DLPack 0.x tensor")
    managed = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor))
    _api.PyCapsule_SetName(capsule, _USED)
    owner = _DLPackOwner(capsule, managed)
    t = managed.contents.dl_tensor
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    kinds = {v: k for k, v in _DL_CODES.items()}
    kind = kinds.get(int(t.dtype.code))
    if kind is None or t.dtype.lanes != 1:
        raise BackendError(f"unsupported DLPack dtype code {t.dtype.code} lanes {t.dtype.lanes}")
    dtype = np.dtype("?" if kind == "b" else f"{kind}{t.dtype.bits // 8}")
    if t.strides:
        expected = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and int(t.strides[i]) != expected:
                raise BackendError("only contiguous row-major DLPack tensors are accepted")
            expected *= shape[i]
    data = int(t.data or 0) + int(t.byte_offset)
    return data, shape, dtype, (int(t.device.device_type), int(t.device.device_id)), owner


# --- device memory ---------------------------------------------------------------------------------
class DeviceAllocation:
    """``cudaMalloc`` memory, freed when the last array over it is collected."""

    def __init__(self, nbytes: int, ordinal: int) -> None:
        use_device(ordinal)
        self.ordinal = ordinal
        self.nbytes = nbytes
        self.ptr = int(check(cudart().cudaMalloc(max(1, nbytes)), f"cudaMalloc({nbytes})"))

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with contextlib.suppress(Exception):  # interpreter shutdown
                cudart().cudaFree(ptr)

    def __del__(self) -> None:
        self.free()


class DeviceArray:
    """A C-contiguous array in device memory. ``owner`` keeps the memory alive (an allocation, or the
    foreign array it was wrapped from)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any, ordinal: int, owner: Any = None) -> None:
        self.ptr = int(ptr)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.ordinal = ordinal
        self.owner = owner

    @classmethod
    def empty(cls, shape: tuple[int, ...], dtype: Any, ordinal: int) -> DeviceArray:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        alloc = DeviceAllocation(nbytes, ordinal)
        return cls(alloc.ptr, shape, dtype, ordinal, alloc)

    @classmethod
    def zeros(cls, shape: tuple[int, ...], dtype: Any, ordinal: int) -> DeviceArray:
        arr = cls.empty(shape, dtype, ordinal)
        check(cudart().cudaMemset(arr.ptr, 0, arr.nbytes), "cudaMemset")
        return arr

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return int(self.size * self.dtype.itemsize)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device=cuda:{self.ordinal})"

    def __getitem__(self, key: int | slice) -> DeviceArray:
        """Rows along the first axis (an int or a step-1 slice): a view, no copy."""
        row = math.prod(self.shape[1:]) * self.dtype.itemsize
        if isinstance(key, int):
            if not -self.shape[0] <= key < self.shape[0]:
                raise IndexError(key)
            key %= self.shape[0]
            return DeviceArray(self.ptr + key * row, self.shape[1:], self.dtype, self.ordinal, self)
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            raise IndexError("device arrays take step-1 row slices only")
        n = max(0, stop - start)
        return DeviceArray(self.ptr + start * row, (n, *self.shape[1:]), self.dtype, self.ordinal, self)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": None,  # producers here synchronise before handing arrays out
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDL_CUDA, self.ordinal)

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        return to_dlpack(self.ptr, self.shape, self.dtype, (_KDL_CUDA, self.ordinal), self)

    # --- copies (callers count them) ------------------------------------------------------------
    def copy_to_host(self, out: np.ndarray | None = None, stream: Any = None) -> np.ndarray:
        """Download into ``out`` (or a new array); synchronous."""
        rt = cudart()
        if out is None:
            out = np.empty(self.shape, self.dtype)
        if out.nbytes != self.nbytes or not out.flags.c_contiguous:
            raise BackendError("copy_to_host needs a contiguous host array of the same size")
        kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        if stream is None:
            check(rt.cudaMemcpy(out.ctypes.data, self.ptr, self.nbytes, kind), "cudaMemcpy D2H")
        else:
            check(
                rt.cudaMemcpyAsync(out.ctypes.data, self.ptr, self.nbytes, kind, stream),
                "cudaMemcpyAsync D2H",
            )
            check(rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        return out

    def copy_from_host(self, src: np.ndarray, stream: Any = None) -> None:
        """Upload ``src`` (same byte size); asynchronous on ``stream`` when given."""
        rt = cudart()
        src = np.ascontiguousarray(src)
        if src.nbytes != self.nbytes:
            raise BackendError(f"copy_from_host: {src.nbytes} bytes into a {self.nbytes}-byte array")
        kind = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        if stream is None:
            check(rt.cudaMemcpy(self.ptr, src.ctypes.data, src.nbytes, kind), "cudaMemcpy H2D")
        else:
            check(rt.cudaMemcpyAsync(self.ptr, src.ctypes.data, src.nbytes, kind, stream), "cudaMemcpyAsync H2D")


def _pointer_device(ptr: int) -> int:
    try:
        attrs = check(cudart().cudaPointerGetAttributes(ptr), "cudaPointerGetAttributes")
        return int(attrs.device)
    except BackendError:
        return 0


def as_device_array(obj: Any) -> DeviceArray:
    """Wrap a device array from any library (CuPy, PyTorch, Numba, pycuda, ...) without copying.

    Accepts ``__cuda_array_interface__`` (preferred: no stream hand-off needed) or DLPack; the data must
    be C-contiguous and ready (its producer's stream synchronised)."""
    if isinstance(obj, DeviceArray):
        return obj
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        shape = tuple(int(d) for d in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        strides = cai.get("strides")
        if strides is not None:
            expected = dtype.itemsize
            for dim, stride in zip(reversed(shape), reversed(tuple(strides)), strict=True):
                if dim != 1 and stride != expected:
                    raise BackendError("only C-contiguous device arrays are accepted")
                expected *= dim
        ptr = int(cai["data"][0])
        return DeviceArray(ptr, shape, dtype, _pointer_device(ptr), obj)
    if hasattr(obj, "__dlpack__"):
        ptr, shape, dtype, (dev_type, dev_id), owner = from_dlpack(obj)
        if dev_type not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
            raise BackendError(f"a DLPack tensor on device type {dev_type} is not device memory")
        return DeviceArray(ptr, shape, dtype, dev_id, owner)
    raise BackendError(f"{type(obj).__name__} exports neither __cuda_array_interface__ nor __dlpack__")


# --- device images ---------------------------------------------------------------------------------
_FORMATS = ("BGR", "RGB", "NV12")


class DeviceImage:
    """A video frame in device memory.

    ``fmt`` ``BGR``/``RGB``: packed (H, W, 3) uint8 rows of ``pitch`` bytes. ``NV12``: a luma plane of
    H rows then an interleaved chroma plane of H/2 rows, both of ``pitch`` bytes (what NVDEC writes).
    ``shape`` is the logical (H, W, 3), so a device frame reports its size like a host frame does.
    ``matrix`` picks the YUV→RGB matrix for NV12: ``bt601`` (OpenCV's) or ``bt709`` (HD video).
    """

    __slots__ = ("buffer", "fmt", "height", "matrix", "pitch", "width")

    def __init__(
        self,
        buffer: DeviceArray,
        width: int,
        height: int,
        fmt: str = "BGR",
        pitch: int | None = None,
        matrix: str = "bt601",
    ) -> None:
        if fmt not in _FORMATS:
            raise BackendError(f"device image format must be one of {_FORMATS}, got {fmt!r}")
        self.buffer, self.width, self.height, self.fmt, self.matrix = buffer, width, height, fmt, matrix
        self.pitch = pitch or (width * 3 if fmt != "NV12" else width)
        need = self.pitch * (height * 3 // 2 if fmt == "NV12" else height)
        if buffer.nbytes < need:
            raise BackendError(f"{fmt} {width}x{height} needs {need} bytes, the buffer has {buffer.nbytes}")

    @classmethod
    def empty(cls, width: int, height: int, fmt: str, ordinal: int) -> DeviceImage:
        rows = height * 3 // 2 if fmt == "NV12" else height
        cols = width if fmt == "NV12" else width * 3
        return cls(DeviceArray.empty((rows, cols), np.uint8, ordinal), width, height, fmt)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, 3)

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    @property
    def ptr(self) -> int:
        return self.buffer.ptr

    @property
    def uv_ptr(self) -> int:
        return self.buffer.ptr + self.pitch * self.height if self.fmt == "NV12" else 0

    @property
    def ordinal(self) -> int:
        return self.buffer.ordinal

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self.buffer.__cuda_array_interface__

    def to_host(self) -> np.ndarray:
        """Download and convert to a BGR (H, W, 3) uint8 host array (for drawing; counts as a copy)."""
        raw = self.buffer.copy_to_host()
        if self.fmt == "NV12":
            import cv2

            planes = raw.reshape(-1, self.pitch)[:, : self.width]
            code = cv2.COLOR_YUV2BGR_NV12
            return np.asarray(cv2.cvtColor(np.ascontiguousarray(planes), code))
        img = raw.reshape(self.height, self.pitch)[:, : self.width * 3].reshape(self.height, self.width, 3)
        return np.ascontiguousarray(img[:, :, ::-1] if self.fmt == "RGB" else img)
