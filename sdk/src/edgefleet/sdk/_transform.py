"""How a source frame maps into a model input (letterbox, stretch or centre crop), and back: shared by the CPU and
the GPU preprocessors and by the decoders, which map boxes back to source pixels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._manifest import InputSpec

__all__ = ["Transform", "compute_transform"]


@dataclass(frozen=True, slots=True)
class Transform:
    """How a source frame maps into the model input: ``input = source * scale + pad`` (a centre crop has
    negative pads: the resized frame is larger than the input and its centre is kept)."""

    scale_x: float
    scale_y: float
    pad_x: int
    pad_y: int
    src_w: int
    src_h: int
    dst_w: int
    dst_h: int

    @property
    def resized(self) -> tuple[int, int]:
        """(width, height) of the resized image inside the input."""
        return (round(self.src_w * self.scale_x), round(self.src_h * self.scale_y))

    def to_source(self, boxes: np.ndarray) -> np.ndarray:
        """Map (N, 4) x1,y1,x2,y2 boxes in input pixels back to source pixels, clipped to the frame."""
        out = np.empty_like(boxes, dtype=np.float32)
        out[:, 0] = (boxes[:, 0] - self.pad_x) / self.scale_x
        out[:, 2] = (boxes[:, 2] - self.pad_x) / self.scale_x
        out[:, 1] = (boxes[:, 1] - self.pad_y) / self.scale_y
        out[:, 3] = (boxes[:, 3] - self.pad_y) / self.scale_y
        np.clip(out[:, 0::2], 0, self.src_w, out=out[:, 0::2])
        np.clip(out[:, 1::2], 0, self.src_h, out=out[:, 1::2])
        return out


def compute_transform(src_w: int, src_h: int, spec: InputSpec) -> Transform:
    dst_w, dst_h = spec.width, spec.height
    if spec.resize == "stretch":
        return Transform(dst_w / src_w, dst_h / src_h, 0, 0, src_w, src_h, dst_w, dst_h)
    fit = max if spec.resize == "center_crop" else min
    r = fit(dst_w / src_w, dst_h / src_h)
    new_w, new_h = max(1, round(src_w * r)), max(1, round(src_h * r))
    return Transform(
        new_w / src_w, new_h / src_h, (dst_w - new_w) // 2, (dst_h - new_h) // 2, src_w, src_h, dst_w, dst_h
    )
