"""Ultralytics segmentation (``yolo-seg``) and pose (``yolo-pose``) exports, on top of the detect decoder.

Both heads are the detect head with more rows after the class scores: a segmentation model's
``output0`` is (N, 4 + C + M, A), M mask coefficients per anchor, beside ``output1``, (N, M, mh, mw)
prototypes; a pose model's is (N, 4 + C + K * D, A), K keypoints of D values (x, y in input pixels and,
when D is 3, a visibility already sigmoid-ed). Candidates, NMS and limits are the detect decoder's
(Ultralytics' defaults); only the detections kept have their masks or keypoints computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator

from .._errors import DecoderError
from .._results import Keypoint, Mask
from .._transform import Transform
from ._base import Decoded
from ._detection import YoloDecoder, YoloParams, _finish
from ._masks import box_masks, mask_polygons, mask_rle

__all__ = ["COCO_SKELETON", "YoloPoseDecoder", "YoloPoseParams", "YoloSegDecoder", "YoloSegParams"]

#: the 17 COCO keypoints' limbs (1-based keypoint numbers), as Ultralytics draws them
COCO_SKELETON = (
    (16, 14), (14, 12), (17, 15), (15, 13), (12, 13), (6, 12), (7, 13), (6, 7), (6, 8), (7, 9),
    (8, 10), (9, 11), (2, 3), (1, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 7),
)  # fmt: skip


class YoloSegParams(YoloParams):
    """``decoder: {type: yolo-seg, ...}``: Ultralytics segmentation exports."""

    task: ClassVar[str | None] = "segmentation"
    type: Literal["yolo-seg"] = "yolo-seg"  # type: ignore[assignment]
    protos: str | None = Field(None, description="The prototype masks output (default: the model's 4-D output)")
    mask_format: Literal["polygon", "rle"] = Field(
        "polygon", description="Masks as outline polygons or as COCO run-length encoding, in source pixels"
    )


class YoloSegDecoder(YoloDecoder):
    """Ultralytics YOLOv8/YOLO11 segmentation: boxes as the detect decoder keeps them, each with its mask
    (prototypes x its coefficients, upsampled, thresholded at 0, cropped to its box: Ultralytics'
    ``process_mask``), in source pixels. A detection whose mask is empty is dropped, as Ultralytics'
    predictor drops it."""

    kind = "yolo-seg"
    p: YoloSegParams

    def _extra_rows(self) -> int:
        ctx, p = self.ctx, self.p
        assert isinstance(p, YoloSegParams)
        four_d = [name for name in ctx.output_names if len(ctx.output_shape(name) or ()) == 4]
        self.protos = p.protos or (four_d[0] if len(four_d) == 1 else "")
        if self.protos not in ctx.output_names or self.protos == self.output:
            raise DecoderError(
                f"{ctx.manifest.ref}: yolo-seg needs the prototype masks output (N, M, h, w): set decoder.protos "
                f"to one of {[n for n in ctx.output_names if n != self.output]}"
            )
        shape = ctx.output_shape(self.protos)
        if shape is None or len(shape) != 4 or min(shape[1:]) < 1:
            raise DecoderError(
                f"{ctx.manifest.ref}: output {self.protos!r} has shape {list(shape or ())}; yolo-seg reads "
                "prototypes (N, M, h, w) with M, h and w known"
            )
        return shape[1]

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        c = self.candidates(outputs)
        idx = self.select(c, len(transforms))
        start = 4 + c.num_classes
        coeffs = c.columns(idx, start, start + self.extra)
        protos = np.asarray(outputs[self.protos])
        frame, boxes = c.frame[idx], c.boxes[idx]
        spec = self.ctx.manifest.input
        masks: list[Mask | None] = []
        keep = np.ones(idx.size, bool)
        for f in np.unique(frame).tolist():
            rows = np.flatnonzero(frame == f)
            t = transforms[f]
            for row, (x0, y0, m) in zip(
                rows, box_masks(protos[f], coeffs[rows], boxes[rows], (spec.height, spec.width)), strict=True
            ):
                if not m.any():
                    keep[row] = False
                    continue
                masks.append(self._mask(x0, y0, m, t))
        idx = idx[keep]
        return _finish(self.ctx, c.frame[idx], c.boxes[idx], c.scores[idx], c.classes[idx], transforms, masks=masks)

    def _mask(self, x0: int, y0: int, m: np.ndarray, t: Transform) -> Mask:
        if self.p.mask_format == "rle":
            return mask_rle(x0, y0, m, t)
        return Mask(polygons=mask_polygons(x0, y0, m, t))


class YoloPoseParams(YoloParams):
    """``decoder: {type: yolo-pose, ...}``: Ultralytics pose exports."""

    task: ClassVar[str | None] = "pose"
    type: Literal["yolo-pose"] = "yolo-pose"  # type: ignore[assignment]
    kpt_shape: tuple[int, int] = Field(
        (17, 3), description="Keypoints per object and values per keypoint: 3 (x, y, visibility) or 2 (x, y)"
    )

    @field_validator("kpt_shape")
    @classmethod
    def _check_kpt_shape(cls, v: tuple[int, int]) -> tuple[int, int]:
        if v[0] < 1 or v[1] not in (2, 3):
            raise ValueError(f"must be [keypoints, 2 or 3], got {list(v)}")
        return v


class YoloPoseDecoder(YoloDecoder):
    """Ultralytics YOLOv8/YOLO11 pose: boxes as the detect decoder keeps them, each with its keypoints in
    source pixels (mapped back through the letterbox and clipped to the frame, as Ultralytics'
    ``scale_coords`` does) and their visibility scores."""

    kind = "yolo-pose"
    p: YoloPoseParams

    def _extra_rows(self) -> int:
        k, d = self.p.kpt_shape
        return k * d

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        c = self.candidates(outputs)
        idx = self.select(c, len(transforms))
        k, d = self.p.kpt_shape
        start = 4 + c.num_classes
        kp = c.columns(idx, start, start + k * d).reshape(-1, k, d).astype(np.float32)
        frame = c.frame[idx]
        t = np.array([(x.pad_x, x.pad_y, x.scale_x, x.scale_y, x.src_w, x.src_h) for x in transforms], np.float32)
        t = t[frame][:, None, :]
        x = np.clip((kp[:, :, 0] - t[..., 0]) / t[..., 2], 0, t[..., 4])
        y = np.clip((kp[:, :, 1] - t[..., 1]) / t[..., 3], 0, t[..., 5])
        score = kp[:, :, 2] if d == 3 else np.ones_like(x)
        keypoints = [
            tuple(Keypoint(a, b, s) for a, b, s in zip(xs, ys, ss, strict=True))
            for xs, ys, ss in zip(x.tolist(), y.tolist(), score.tolist(), strict=True)
        ]
        return _finish(self.ctx, frame, c.boxes[idx], c.scores[idx], c.classes[idx], transforms, keypoints=keypoints)
