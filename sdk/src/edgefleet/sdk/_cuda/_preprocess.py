"""The GPU preprocessor: frames → one fused kernel launch per batch → the backend's device input binding.

Frames come as host arrays in mapped pinned memory (the pipeline's frame slots by default, discrete GPU or
Jetson: the kernel reads the pixels it samples in place, no copy), as other host arrays (uploaded once each
into a per-row device staging buffer, counted as ``host_to_device``: ``frame_upload`` slots, or any numpy
frame an app passes), or already on the device (NVDEC ``DeviceImage``, or any CuPy/PyTorch/... array
through ``__cuda_array_interface__``/DLPack, read in place, no copy). ``finish`` uploads the per-row
parameters, launches the kernel for the whole batch and waits for it, so the frames' pool slots can be
released as soon as it returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import BackendError
from .._manifest import InputSpec
from .._transform import Transform, compute_transform
from . import _enqueue as enqueue
from ._array import DeviceArray, DeviceImage, as_device_array
from ._bindings import Stream, check, cudart, parse_device, use_device
from ._memory import mapped_device_pointer, pinned_array
from ._nvrtc import F32, I32, I64, PTR, kernel
from ._nvtx import nvtx_range

if TYPE_CHECKING:
    from .._buffer import InputBuffer
    from .._metrics import CopyCounter

__all__ = ["GpuPreprocessor", "ROW_DTYPE"]

ROW_DTYPE = np.dtype(
    {
        "names": [
            "src",
            "uv",
            "src_w",
            "src_h",
            "pitch",
            "uv_pitch",
            "fmt",
            "rw",
            "rh",
            "pad_x",
            "pad_y",
            "inv_sx",
            "inv_sy",
            "reserved",
        ],
        "formats": [
            "<u8",
            "<u8",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<f4",
            "<f4",
            "<i4",
        ],
        "offsets": [0, 8, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60],
        "itemsize": 64,
    }
)
_FMT = {"BGR": 0, "RGB": 1}
_NV12 = {"bt601": 2, "bt709": 3}
_OUT = {"float32": "f32", "float16": "f16", "uint8": "u8"}


class GpuPreprocessor:
    """Letterbox/resize + colour + normalise + layout on the GPU, straight into a device input buffer.

    One instance per model version; used from the batcher thread. ``copies`` (the pipeline's counter)
    receives one ``host_to_device`` entry per uploaded frame.
    """

    def __init__(self, spec: InputSpec, device: str, copies: CopyCounter | None = None) -> None:
        self.spec = spec
        self.copies = copies
        self.ordinal = parse_device(device)
        use_device(self.ordinal)
        self._kernel = kernel(f"ef_preprocess_{_OUT[spec.dtype]}_{spec.layout.lower()}", self.ordinal)
        self._stream = Stream(self.ordinal)
        self._transforms: dict[tuple[int, int], Transform] = {}
        self._staging: list[DeviceArray | None] = []
        self._rows_host = pinned_array((0,), ROW_DTYPE, ordinal=self.ordinal)
        self._rows_dev: DeviceArray | None = None
        self._keep: list[Any] = []  # per batch: foreign arrays whose memory the kernel reads
        # output channel c reads canvas channel order[c] (the canvas is BGR)
        self._order = (2, 1, 0) if spec.color == "RGB" else (0, 1, 2)
        self._mean = tuple(float(m) for m in spec.mean)
        self._scale = tuple(1.0 / float(s) for s in spec.std)
        self._pad = int(np.clip(round(spec.pad_value), 0, 255))
        self.uploads = 0

    # --- the Preprocessor protocol ------------------------------------------------------------------
    def transform_for(self, width: int, height: int) -> Transform:
        key = (width, height)
        t = self._transforms.get(key)
        if t is None:
            t = self._transforms[key] = compute_transform(width, height, self.spec)
        return t

    def __call__(self, image: Any, buffer: InputBuffer, row: int) -> Transform:
        if row >= buffer.capacity:
            raise BackendError(f"row {row} is past the input buffer's {buffer.capacity} rows")
        self._ensure_rows(buffer.capacity)
        if row == 0:
            self._keep.clear()
        use_device(self.ordinal)
        rec = self._rows_host[row]
        if isinstance(image, np.ndarray):
            h, w = self._host_source(image, row, rec)
        elif isinstance(image, DeviceImage):
            h, w = image.height, image.width
            rec["src"], rec["pitch"] = image.ptr, image.pitch
            if image.fmt == "NV12":
                rec["fmt"] = _NV12.get(image.matrix, 2)
                rec["uv"], rec["uv_pitch"] = image.uv_ptr, image.pitch
            else:
                rec["fmt"], rec["uv"], rec["uv_pitch"] = _FMT[image.fmt], 0, 0
            self._keep.append(image)
        else:  # CuPy / PyTorch / Numba / pycuda: (H, W, 3) uint8 BGR on the device
            arr = as_device_array(image)
            if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
                raise BackendError(f"device frames must be (H, W, 3) uint8 BGR, got {arr.dtype} {arr.shape}")
            h, w = arr.shape[0], arr.shape[1]
            rec["src"], rec["pitch"], rec["fmt"], rec["uv"], rec["uv_pitch"] = arr.ptr, w * 3, 0, 0, 0
            self._keep.append(arr)
        t = self.transform_for(w, h)
        rw, rh = t.resized
        rec["src_w"], rec["src_h"] = w, h
        rec["rw"], rec["rh"], rec["pad_x"], rec["pad_y"] = rw, rh, t.pad_x, t.pad_y
        rec["inv_sx"], rec["inv_sy"] = w / rw, h / rh
        return t

    def finish(self, buffer: InputBuffer, n: int) -> None:
        """Launch the kernel for rows [0, n) and wait for it (and the uploads) to finish."""
        if n <= 0:
            return
        out = as_device_array(buffer.array)
        spec = self.spec
        row_stride = int(np.prod(out.shape[1:]))
        with nvtx_range("preprocess.kernel"):
            assert self._rows_dev is not None  # set by __call__
            nbytes = n * ROW_DTYPE.itemsize
            # pinned rows: an enqueue that keeps the GIL
            enqueue.copy(
                self._rows_dev.ptr, self._rows_host.ctypes.data, nbytes, "h2d", self._stream.raw, "row parameters"
            )
            o = self._order
            self._kernel.launch(
                ((spec.width + 31) // 32, (spec.height + 7) // 8, n),
                (32, 8, 1),
                [
                    (self._rows_dev.ptr, PTR),
                    (out.ptr, PTR),
                    (spec.width, I32),
                    (spec.height, I32),
                    (row_stride, I64),
                    (self._mean[0], F32),
                    (self._mean[1], F32),
                    (self._mean[2], F32),
                    (self._scale[0], F32),
                    (self._scale[1], F32),
                    (self._scale[2], F32),
                    (o[0], I32),
                    (o[1], I32),
                    (o[2], I32),
                    (self._pad, I32),
                ],
                self._stream.handle,
            )
            self._stream.synchronize()
        self._keep.clear()

    # --- helpers -------------------------------------------------------------------------------------
    def _ensure_rows(self, capacity: int) -> None:
        if self._rows_host.shape[0] < capacity:
            self._rows_host = pinned_array((capacity,), ROW_DTYPE, ordinal=self.ordinal)
            self._rows_dev = DeviceArray.empty((capacity * ROW_DTYPE.itemsize,), np.uint8, self.ordinal)
            self._staging.extend([None] * (capacity - len(self._staging)))

    def _host_source(self, image: np.ndarray, row: int, rec: Any) -> tuple[int, int]:
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise BackendError(f"frames must be (H, W, 3) uint8 BGR, got {image.dtype} {image.shape}")
        h, w = int(image.shape[0]), int(image.shape[1])
        rec["fmt"], rec["uv"], rec["uv_pitch"] = 0, 0, 0
        mapped = mapped_device_pointer(image) if image.flags.c_contiguous else None
        if mapped is not None:  # Jetson: the GPU reads the pool slot in place
            rec["src"], rec["pitch"] = mapped, w * 3
            return h, w
        src = np.ascontiguousarray(image)
        staging = self._staging[row]
        if staging is None or staging.nbytes < src.nbytes:
            staging = self._staging[row] = DeviceArray.empty((src.nbytes,), np.uint8, self.ordinal)
        rt = cudart()
        with nvtx_range("preprocess.upload"):
            check(
                rt.cudaMemcpyAsync(
                    staging.ptr,
                    src.ctypes.data,
                    src.nbytes,
                    rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                    self._stream.raw,
                ),
                "cudaMemcpyAsync (frame upload)",
            )
        self.uploads += 1
        if self.copies is not None:
            self.copies.add("host_to_device", src.nbytes)
        rec["src"], rec["pitch"] = staging.ptr, w * 3
        return h, w

    def close(self) -> None:
        self._stream.close()
        self._staging.clear()
        self._rows_dev = None
