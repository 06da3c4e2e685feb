"""CPU preprocessing: resize/letterbox, colour order, normalisation and layout, written straight into the
backend's input buffer (one batch row per frame). The GPU path does the same in one fused kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ._manifest import InputSpec
from ._transform import Transform, compute_transform

if TYPE_CHECKING:
    from ._buffer import InputBuffer
    from ._metrics import CopyCounter

__all__ = ["CpuPreprocessor", "Preprocessor", "Transform", "compute_transform", "make_preprocessor"]


class Preprocessor(Protocol):
    """Writes frames into the rows of a backend input buffer.

    ``__call__`` handles one frame (host numpy BGR, or a device image for GPU preprocessors) into row
    ``row``; ``finish`` runs once per batch after the last row (a GPU preprocessor launches or syncs
    there). Both run on the batcher thread.
    """

    def transform_for(self, width: int, height: int) -> Transform: ...

    def __call__(self, image: Any, buffer: InputBuffer, row: int) -> Transform: ...

    def finish(self, buffer: InputBuffer, n: int) -> None: ...


def make_preprocessor(spec: InputSpec, buffer_device: str, copies: CopyCounter | None = None) -> Preprocessor:
    """The CPU preprocessor for host buffers; the fused CUDA kernel for device buffers. ``copies`` (the
    pipeline's counter) receives the GPU path's frame uploads (``host_to_device``, one per host frame)."""
    if buffer_device.startswith("cuda"):
        from ._cuda._preprocess import GpuPreprocessor  # the CUDA layer, present with the [cuda] extra

        return GpuPreprocessor(spec, buffer_device, copies)
    return CpuPreprocessor(spec)


class CpuPreprocessor:
    """Writes preprocessed frames into rows of a host input buffer (OpenCV resize + numpy maths).

    One instance per model version; used from one thread (the batcher's). It keeps one padded canvas per
    source size so the letterbox border is filled once, not per frame.
    """

    def __init__(self, spec: InputSpec) -> None:
        import cv2

        self._cv2 = cv2
        self.spec = spec
        self._canvases: dict[tuple[int, int], np.ndarray] = {}
        self._transforms: dict[tuple[int, int], Transform] = {}
        order = (2, 1, 0) if spec.color == "RGB" else (0, 1, 2)  # frames arrive BGR
        self._order = order
        self._scale = np.array([1.0 / s for s in spec.std], dtype=np.float32)
        self._mean = np.array(spec.mean, dtype=np.float32)

    def transform_for(self, width: int, height: int) -> Transform:
        key = (width, height)
        t = self._transforms.get(key)
        if t is None:
            t = self._transforms[key] = compute_transform(width, height, self.spec)
        return t

    def _canvas(self, t: Transform) -> np.ndarray:
        key = (t.src_w, t.src_h)
        canvas = self._canvases.get(key)
        if canvas is None:
            pad = int(np.clip(round(self.spec.pad_value), 0, 255))
            canvas = np.full((t.dst_h, t.dst_w, 3), pad, dtype=np.uint8)
            self._canvases[key] = canvas
        return canvas

    def finish(self, buffer: InputBuffer, n: int) -> None:
        """Nothing to do on the CPU: every row was written synchronously."""

    def __call__(self, image: np.ndarray, buffer: InputBuffer, row: int) -> Transform:
        """Preprocess one BGR uint8 frame into row ``row`` of a host buffer."""
        return self.write(image, buffer.array[row])

    def write(self, image: np.ndarray, out: np.ndarray) -> Transform:
        """Preprocess one BGR uint8 frame into ``out`` (one batch row: CHW or HWC of the model's dtype)."""
        h, w = image.shape[:2]
        t = self.transform_for(w, h)
        canvas = self._canvas(t)
        rw, rh = t.resized
        if t.pad_x < 0 or t.pad_y < 0:  # centre crop: resize whole, keep the middle
            resized = self._cv2.resize(image, (rw, rh), interpolation=self._cv2.INTER_LINEAR)
            x0, y0 = max(0, -t.pad_x), max(0, -t.pad_y)
            np.copyto(canvas, resized[y0 : y0 + t.dst_h, x0 : x0 + t.dst_w])
        elif (rw, rh) == (w, h):
            np.copyto(canvas[t.pad_y : t.pad_y + rh, t.pad_x : t.pad_x + rw], image)
        else:
            region = canvas[t.pad_y : t.pad_y + rh, t.pad_x : t.pad_x + rw]
            self._cv2.resize(image, (rw, rh), dst=region, interpolation=self._cv2.INTER_LINEAR)
        spec = self.spec
        if spec.dtype == "uint8":
            if spec.layout == "NCHW":
                for c, src in enumerate(self._order):
                    out[c] = canvas[:, :, src]
            else:
                out[...] = canvas[:, :, list(self._order)]
            return t
        for c, src in enumerate(self._order):
            plane = out[c] if spec.layout == "NCHW" else out[:, :, c]
            np.subtract(canvas[:, :, src], self._mean[c], out=plane, dtype=plane.dtype, casting="unsafe")
            np.multiply(plane, self._scale[c], out=plane, casting="unsafe")
        return t
