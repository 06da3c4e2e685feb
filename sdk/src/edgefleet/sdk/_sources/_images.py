"""A folder of images (or one image file), read in name order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._errors import SourceError
from ._base import Source, SourceSpec
from ._configs import IMAGE_SUFFIXES

__all__ = ["IMAGE_SUFFIXES", "ImageFolderSource"]


class ImageFolderSource(Source):
    """Every image in a folder (sorted by name), or a single image file. Never drops."""

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self._files: list[Path] = []
        self._next = 0

    def open(self) -> None:
        path = Path(self.spec.uri)
        if path.is_dir():
            self._files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
            if not self._files:
                raise SourceError(f"{path}: no images in this folder ({', '.join(sorted(IMAGE_SUFFIXES))})")
        elif path.is_file():
            self._files = [path]
        else:
            raise SourceError(f"{path}: no such file or folder")
        self._next = 0

    def frame_shape(self) -> tuple[int, int] | None:
        return None  # images may differ in size; the runner sizes the pool from the first

    def frame_count(self) -> int | None:
        return len(self._files)

    def read(self, out: np.ndarray | None) -> np.ndarray | None:
        import cv2

        while self._next < len(self._files):
            path = self._files[self._next]
            self._next += 1
            image = cv2.imread(str(path), cv2.IMREAD_COLOR)
            if image is None:
                raise SourceError(f"{path}: not a readable image")
            if self.spec.loop and self._next == len(self._files):
                self._next = 0
            return np.asarray(image)
        return None

    def close(self) -> None:
        self._files = []
