"""Typed result records: what a pipeline yields for every frame."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Classification", "Detection", "Keypoint", "Mask", "Result"]


@dataclass(frozen=True, slots=True)
class Mask:
    """An instance mask in source-frame pixels, in one of two compact forms (the decoder's
    ``mask_format``):

    - ``polygons``: the mask's outer outlines, each a flat ``(x0, y0, x1, y1, ...)`` tuple;
    - ``rle``: COCO's uncompressed run-length encoding of the whole frame, column-major: ``counts``
      alternate runs of 0s and 1s, starting with 0s, over ``size`` (height, width) pixels.
    """

    polygons: tuple[tuple[float, ...], ...] = ()
    counts: tuple[int, ...] | None = None
    size: tuple[int, int] | None = None

    @property
    def area(self) -> int:
        """Pixels inside the mask (from the RLE; 0 for polygons, whose area is ``cv2.contourArea``'s)."""
        return sum(self.counts[1::2]) if self.counts else 0

    def to_dict(self) -> dict[str, Any]:
        if self.counts is not None and self.size is not None:
            return {"rle": {"size": list(self.size), "counts": list(self.counts)}}
        return {"polygons": [[round(v, 1) for v in poly] for poly in self.polygons]}


@dataclass(frozen=True, slots=True)
class Keypoint:
    """A pose keypoint in source-frame pixels with its visibility score (1.0 when the model has none)."""

    x: float
    y: float
    score: float

    def to_list(self) -> list[float]:
        return [round(self.x, 1), round(self.y, 1), round(self.score, 3)]


@dataclass(frozen=True, slots=True)
class Detection:
    """One object: a box in source-frame pixels (x1, y1, x2, y2), a score and a class; a segmentation
    model adds its ``mask``, a pose model its ``keypoints`` (in the model's keypoint order)."""

    box: tuple[float, float, float, float]
    score: float
    class_id: int
    label: str
    mask: Mask | None = None
    keypoints: tuple[Keypoint, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "box": [round(v, 2) for v in self.box],
            "score": round(self.score, 4),
            "class_id": self.class_id,
            "label": self.label,
        }
        if self.mask is not None:
            out["mask"] = self.mask.to_dict()
        if self.keypoints:
            out["keypoints"] = [k.to_list() for k in self.keypoints]
        return out


@dataclass(frozen=True, slots=True)
class Classification:
    """One class of a top-k classification."""

    class_id: int
    label: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"class_id": self.class_id, "label": self.label, "score": round(self.score, 5)}


@dataclass(frozen=True, slots=True)
class Result:
    """Everything the pipeline produced for one frame.

    ``model`` and ``model_version`` name the exact model version that processed the frame (they change
    at a hot swap). ``timestamp`` is the capture time in seconds since the epoch; ``latency_ms`` is the
    time from capture to this result. ``source`` names what the frame was read from, credentials
    redacted: the image file for a folder, the file or camera URI otherwise.
    """

    stream_id: str
    sequence: int
    timestamp: float
    model: str
    model_version: str
    frame_width: int
    frame_height: int
    latency_ms: float
    detections: tuple[Detection, ...] = ()
    classifications: tuple[Classification, ...] = ()
    raw: dict[str, np.ndarray] | None = field(default=None, compare=False)
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the JSONL sink writes exactly this)."""
        out: dict[str, Any] = {
            "stream": self.stream_id,
            "seq": self.sequence,
            "ts": round(self.timestamp, 6),
            "model": self.model,
            "version": self.model_version,
            "width": self.frame_width,
            "height": self.frame_height,
            "latency_ms": round(self.latency_ms, 3),
        }
        if self.source:
            out["source"] = self.source
        if self.detections:
            out["detections"] = [d.to_dict() for d in self.detections]
        if self.classifications:
            out["classifications"] = [c.to_dict() for c in self.classifications]
        return out
