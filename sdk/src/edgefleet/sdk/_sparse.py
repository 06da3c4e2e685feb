"""Model outputs of which only the part a decoder needs came back from the GPU.

A GPU backend can threshold a detector's class scores on the device and copy back only the anchors
(YOLO columns, NanoDet cells) whose best score passes: a few hundred kilobytes instead of tens of
megabytes per batch, and no host pass over every score. :class:`CandidateRows` carries those anchors
with their indices. Decoders that know it read ``data`` and ``index``; anything else (the hot-swap gate,
health checks, raw outputs) gets the dense tensor of the declared shape from ``np.asarray``, with the
left-out anchors zeroed, which no score threshold >= 0 keeps.

A classifier's (N, C) output needs only its top k per row: :class:`TopK` carries those values, their
columns and each row's log-sum-exp (so a softmax of the k values needs nothing else).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = ["CandidateFilter", "CandidateRows", "TopK"]


@dataclass(frozen=True)
class CandidateFilter:
    """What a decoder asks a GPU backend to do to one output: for a detector, threshold it on the device
    and copy back only the anchors that pass, as :class:`CandidateRows` (at most ``capacity`` per frame;
    a frame with more gets the whole tensor); for a classifier, only each row's top ``k``.

    ``channels_first``: Ultralytics (N, 4 + classes, A). ``rows``: scores (N, A, C), every column a
    class score, with an optional ``companion`` (N, A, R) gathered for the same anchors. ``top_k``: a
    classifier's (N, C) output (any trailing shape whose product is C); the ``k`` largest values of each
    row come back as :class:`TopK` (``threshold`` is not used)."""

    output: str
    threshold: float
    layout: Literal["channels_first", "rows", "top_k"]
    classes: int = 0
    companion: str | None = None
    capacity: int = 1024
    k: int = 0


class CandidateRows:
    """Logical shape ``shape``: (N, A, C) with ``axis=1`` or (N, C, A) with ``axis=2`` (A anchors).

    ``data`` holds the kept anchors along ``axis`` (m of them, m >= every frame's count), ``index``
    (N, m) int32 their anchor numbers, ascending within a frame and -1 past its count (``data`` is zero
    there). Every anchor left out had no score at or above the filter's threshold.
    """

    __slots__ = ("axis", "data", "index", "shape")

    def __init__(self, data: np.ndarray, index: np.ndarray, shape: tuple[int, int, int], axis: int) -> None:
        if axis not in (1, 2) or data.ndim != 3 or index.shape != (data.shape[0], data.shape[axis]):
            raise ValueError(f"inconsistent candidates: data {data.shape}, index {index.shape}, axis {axis}")
        self.data, self.index, self.shape, self.axis = data, index, shape, axis

    def counts(self) -> np.ndarray:
        """Kept anchors per frame."""
        return np.asarray((self.index >= 0).sum(axis=1))

    def frame(self, i: int) -> np.ndarray:
        """Frame ``i`` as a dense (A, C) or (C, A) array."""
        out = np.zeros(self.shape[1:], self.data.dtype)
        keep = self.index[i] >= 0
        cols = self.index[i][keep]
        if self.axis == 1:
            out[cols] = self.data[i][keep]
        else:
            out[:, cols] = self.data[i][:, keep]
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = np.stack([self.frame(i) for i in range(self.shape[0])]) if self.shape[0] else np.zeros(self.shape)
        return out.astype(dtype, copy=False) if dtype is not None else out

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            return self.frame(int(key) % max(1, self.shape[0]))
        return np.asarray(self)[key]

    def __repr__(self) -> str:
        return f"CandidateRows(shape={self.shape}, kept={self.counts().tolist()})"


class TopK:
    """The ``k`` largest values of each row of an output of logical shape ``shape`` (N, ...), rows
    flattened to C columns.

    ``values`` (N, k) float32, largest first (ties: lower column first); ``index`` (N, k) int32 their
    columns; ``lse`` (N,) each row's log-sum-exp (``exp(values - lse[:, None])`` is the softmax of those
    values over the whole row), NaN for a row holding a NaN or an infinity; ``low`` (N,) each row's
    minimum. ``np.asarray`` gives a dense array of ``shape``: the k values in place, every other column
    at the row's minimum (so the top k and their order are unchanged), NaN across a row marked bad.
    """

    __slots__ = ("index", "low", "lse", "shape", "values")

    def __init__(
        self, values: np.ndarray, index: np.ndarray, lse: np.ndarray, low: np.ndarray, shape: tuple[int, ...]
    ) -> None:
        n = shape[0] if shape else -1
        if values.ndim != 2 or index.shape != values.shape or values.shape[0] != n or lse.shape != (n,):
            raise ValueError(f"inconsistent top k: values {values.shape}, index {index.shape}, shape {shape}")
        self.values, self.index, self.lse, self.low, self.shape = values, index, lse, low, shape

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        n = self.shape[0]
        c = int(np.prod(self.shape[1:])) if len(self.shape) > 1 else 1
        out = np.repeat(self.low.astype(np.float32)[:, None], c, axis=1)
        np.put_along_axis(out, self.index.astype(np.int64), self.values, axis=1)
        out[~np.isfinite(self.lse)] = np.nan
        out = out.reshape(n, *self.shape[1:])
        return out.astype(dtype, copy=False) if dtype is not None else out

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):  # one row (``Result.raw``): densify only that one
            i = int(key) % max(1, self.shape[0])
            row = TopK(
                self.values[i : i + 1],
                self.index[i : i + 1],
                self.lse[i : i + 1],
                self.low[i : i + 1],
                (1, *self.shape[1:]),
            )
            return np.asarray(row)[0]
        return np.asarray(self)[key]

    def __repr__(self) -> str:
        return f"TopK(shape={self.shape}, k={self.values.shape[1]})"
