"""A folder of images (or one image file), read in name order."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .._errors import SourceError
from ._base import Source, SourceSpec
from ._configs import IMAGE_SUFFIXES

__all__ = ["IMAGE_SUFFIXES", "ImageFolderSource"]

_log = logging.getLogger(__name__)


class ImageFolderSource(Source):
    """Every image in a folder (sorted by name), or a single image file. Never drops.

    A file that is not an image (by its suffix) or cannot be decoded is passed over with one warning
    naming it and counted in ``skipped`` (the stream's ``skipped`` in the pipeline's stats); the run goes
    on with the next file. Hidden files (a leading dot) are ignored without a word. Each frame names its
    file (:meth:`frame_source`, ``Result.source``)."""

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self._files: list[Path] = []
        self._next = 0
        self._current: Path | None = None
        self.skipped = 0
        self._warned: set[Path] = set()  # a looping folder warns once per bad file

    def open(self) -> None:
        path = Path(self.spec.uri)
        if path.is_dir():
            entries = sorted(p for p in path.iterdir() if not p.name.startswith(".") and p.is_file())
            self._files = [p for p in entries if p.suffix.lower() in IMAGE_SUFFIXES]
            for other in entries:
                if other.suffix.lower() not in IMAGE_SUFFIXES:
                    self._skip(other, "not an image file (by its name)")
            if not self._files:
                raise SourceError(f"{path}: no images in this folder ({', '.join(sorted(IMAGE_SUFFIXES))})")
        elif path.is_file():
            self._files = [path]
        else:
            raise SourceError(f"{path}: no such file or folder")
        self._next = 0

    def _skip(self, path: Path, why: str) -> None:
        if path in self._warned:
            return
        self._warned.add(path)
        self.skipped += 1
        _log.warning("%s: skipped, %s", path, why)

    def frame_shape(self) -> tuple[int, int] | None:
        return None  # images may differ in size; the runner sizes the pool from the first

    def frame_count(self) -> int | None:
        return len(self._files)

    def frame_source(self) -> str | None:
        return str(self._current) if self._current is not None else None

    def read(self, out: np.ndarray | None) -> np.ndarray | None:
        import cv2

        tried = 0
        while self._next < len(self._files):
            path = self._files[self._next]
            self._next += 1
            if self.spec.loop and self._next == len(self._files):
                self._next = 0
            tried += 1
            image = cv2.imread(str(path), cv2.IMREAD_COLOR)
            if image is None:
                if len(self._files) == 1 and not Path(self.spec.uri).is_dir():
                    raise SourceError(f"{path}: not a readable image")
                self._skip(path, "not a readable image")
                if tried >= len(self._files) and self.spec.loop:
                    raise SourceError(f"{self.spec.uri}: none of its {len(self._files)} images can be read")
                continue
            self._current = path
            return np.asarray(image)
        if tried and self._current is None:
            raise SourceError(f"{self.spec.uri}: none of its {len(self._files)} images can be read")
        return None

    def close(self) -> None:
        self._files = []
