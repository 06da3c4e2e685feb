"""A synthetic test pattern: moving colour bars with a frame counter. Needs no camera and no file."""

from __future__ import annotations

import numpy as np

from .._errors import SourceError
from ._base import Source, SourceSpec
from ._configs import SyntheticConfig

__all__ = ["SyntheticSource"]


class SyntheticSource(Source):
    """Options (:class:`SyntheticConfig`): ``width`` (640), ``height`` (480), ``fps`` (30), ``frames``
    (0 = endless), ``white_after`` (frames from this index on are plain white: a scene change, for testing).

    It is paced at ``fps`` and behaves as a live camera (drops under pressure) unless ``live=false``.
    """

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        config = spec.config
        if not isinstance(config, SyntheticConfig):  # the ranges are the config's
            raise SourceError(f"{spec.uri}: a synthetic source needs a SyntheticConfig, got {type(config).__name__}")
        self.width, self.height, self.fps = config.width, config.height, config.fps
        self.frames, self.white_after = config.frames, config.white_after
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
