"""A synthetic test pattern: moving colour bars with a frame counter. Needs no camera and no file."""

from __future__ import annotations

import numpy as np

from .._errors import SourceError
from ._base import Source, SourceSpec

__all__ = ["SyntheticSource"]


class SyntheticSource(Source):
    """Options: ``width`` (640), ``height`` (480), ``fps`` (30), ``frames`` (0 = endless),
    ``white_after`` (frames from this index on are plain white: a scene change, for testing).

    It is paced at ``fps`` and behaves as a live camera (drops under pressure) unless ``live=false``.
    """

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        try:
            self.width = int(spec.options.get("width", "640"))
            self.height = int(spec.options.get("height", "480"))
            self.fps = float(spec.options.get("fps", "30"))
            self.frames = int(spec.options.get("frames", "0"))
            self.white_after = int(spec.options.get("white_after", "-1"))
        except ValueError as exc:
            raise SourceError(f"{spec.uri}: bad option ({exc})") from None
        if not (16 <= self.width <= 8192 and 16 <= self.height <= 8192) or not 0 < self.fps < 1e4 or self.frames < 0:
            raise SourceError(f"{spec.uri}: width/height must be 16..8192, fps 0..10000 (not 0), frames >= 0")
        self._n = 0
        self._bars = np.zeros((self.height, self.width, 3), np.uint8)
        colours = np.array(
            [
                [255, 255, 255],
                [0, 255, 255],
                [255, 255, 0],
                [0, 255, 0],
                [255, 0, 255],
                [0, 0, 255],
                [255, 0, 0],
                [0, 0, 0],
            ],
            np.uint8,
        )
        idx = np.arange(self.width) * len(colours) // self.width
        self._bars[:] = colours[idx][None, :, :]

    def open(self) -> None:
        self._n = 0

    def frame_shape(self) -> tuple[int, int] | None:
        return (self.height, self.width)

    def nominal_fps(self) -> float | None:
        return self.fps

    def frame_count(self) -> int | None:
        return self.frames or None

    def read(self, out: np.ndarray | None) -> np.ndarray | None:
        if self.frames and self._n >= self.frames:
            return None
        image = out if out is not None and out.shape == self._bars.shape else np.empty_like(self._bars)
        if 0 <= self.white_after <= self._n:
            image[:] = 255
            self._n += 1
            return image
        shift = (self._n * 4) % self.width
        image[:, : self.width - shift] = self._bars[:, shift:]
        image[:, self.width - shift :] = self._bars[:, :shift]
        # a moving white square, so detectors and trackers see motion
        s = max(8, self.height // 8)
        y = (self._n * 3) % max(1, self.height - s)
        x = (self._n * 5) % max(1, self.width - s)
        image[y : y + s, x : x + s] = 255
        self._n += 1
        return image

    def close(self) -> None:
        pass
