"""Typed result records: what a pipeline yields for every frame."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Classification", "Detection", "Result"]


@dataclass(frozen=True, slots=True)
class Detection:
    """One object: a box in source-frame pixels (x1, y1, x2, y2), a score and a class."""

    box: tuple[float, float, float, float]
    score: float
    class_id: int
    label: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "box": [round(v, 2) for v in self.box],
            "score": round(self.score, 4),
            "class_id": self.class_id,
            "label": self.label,
        }


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
