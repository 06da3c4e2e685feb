"""Model outputs of which only the part a decoder needs came back from the GPU.

A GPU backend can threshold a detector's class scores on the device and copy back only the anchors
(YOLO columns, NanoDet cells) whose best score passes: a few hundred kilobytes instead of tens of
megabytes per batch, and no host pass over every score. :class:`CandidateRows` carries those anchors
with their indices. Decoders that know it read ``data`` and ``index``; anything else (the hot-swap gate,
health checks, raw outputs) gets the dense tensor of the declared shape from ``np.asarray``, with the
left-out anchors zeroed, which no score threshold >= 0 keeps.

A classifier's (N, C) output needs only its top k per row: :class:`TopK` carries those values, their
columns and each row's log-sum-exp (so a softmax of the k values needs nothing else).

A GFL head (NanoDet: per stride, class scores and box distributions) can be decoded further on the
device: :class:`BoxCandidates` carries, for every stride at once, one record per (cell, class) above the
threshold with its box already in input pixels; the box distributions themselves never come back
(:class:`ConsumedOutput` stands in for them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = ["BoxCandidates", "CandidateFilter", "CandidateRows", "ConsumedOutput", "TopK", "all_finite"]


@dataclass(frozen=True)
class CandidateFilter:
    """What a decoder asks a GPU backend to do to one output: for a detector, threshold it on the device
    and copy back only the anchors that pass, as :class:`CandidateRows` (at most ``capacity`` per frame;
    a frame with more gets the whole tensor); for a classifier, only each row's top ``k``.

    ``channels_first``: Ultralytics (N, 4 + classes + ``extra``, A): the class scores are rows 4 .. 4 +
    classes, and ``extra`` rows after them (a segmentation head's mask coefficients, a pose head's
    keypoints) come back with each kept anchor. ``rows``: scores (N, A, C), every column a
    class score, with an optional ``companion`` (N, A, R) gathered for the same anchors. ``top_k``: a
    classifier's (N, C) output (any trailing shape whose product is C); the ``k`` largest values of each
    row come back as :class:`TopK` (``threshold`` is not used). ``gfl``: one stride of a GFL head, scores
    (N, A, C) and in ``companion`` its box distributions (N, A, 4 * ``bins``), cells on a grid
    ``grid_width`` wide, numbered from ``first`` across strides; every ``gfl`` filter of a run appends to
    the same :class:`BoxCandidates` (at most ``capacity`` records per frame over all strides), one record
    per (cell, class) with a score above ``threshold`` (``multi_label``), else per cell for its best class.
    ``levels``: the head's number of strides; a backend decodes them only when it took a filter for each.
    ``nms_iou`` (``gfl``): also finish each frame on the device as the host decoder would: only the
    classes in ``keep_classes`` (all when None), the best ``pre_nms_top_k``, greedy NMS within a class at
    this IoU threshold, at most ``max_detections``; the records that come back are then the detections."""

    output: str
    threshold: float
    layout: Literal["channels_first", "rows", "top_k", "gfl"]
    classes: int = 0
    extra: int = 0
    companion: str | None = None
    capacity: int = 1024
    k: int = 0
    stride: int = 0
    grid_width: int = 0
    first: int = 0
    bins: int = 0
    multi_label: bool = True
    levels: int = 1
    nms_iou: float | None = None
    pre_nms_top_k: int = 0
    max_detections: int = 0
    keep_classes: tuple[int, ...] | None = None


class _DenseView:
    """What the GPU filters' output forms share: ``np.asarray`` builds the dense tensor of the declared
    ``shape`` (from ``_dense``), and indexing goes through it unless a form has a cheaper way."""

    __slots__ = ()

    def _dense(self) -> np.ndarray:
        raise NotImplementedError

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self._dense()
        return out.astype(dtype, copy=False) if dtype is not None else out

    def __getitem__(self, key: Any) -> Any:
        return np.asarray(self)[key]


class CandidateRows(_DenseView):
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

    def all_finite(self) -> bool:
        """No NaN or infinity among the kept anchors (the left-out ones are zeros)."""
        return self.data.dtype.kind != "f" or bool(np.isfinite(self.data).all())

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

    def _dense(self) -> np.ndarray:
        return np.stack([self.frame(i) for i in range(self.shape[0])]) if self.shape[0] else np.zeros(self.shape)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            return self.frame(int(key) % max(1, self.shape[0]))
        return super().__getitem__(key)

    def __repr__(self) -> str:
        return f"CandidateRows(shape={self.shape}, kept={self.counts().tolist()})"


class TopK(_DenseView):
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

    def all_finite(self) -> bool:
        """No row held a NaN or an infinity (its log-sum-exp is NaN then)."""
        return bool(np.isfinite(self.lse).all())

    def _dense(self) -> np.ndarray:
        n = self.shape[0]
        c = int(np.prod(self.shape[1:])) if len(self.shape) > 1 else 1
        out = np.repeat(self.low.astype(np.float32)[:, None], c, axis=1)
        np.put_along_axis(out, self.index.astype(np.int64), self.values, axis=1)
        out[~np.isfinite(self.lse)] = np.nan
        return out.reshape(n, *self.shape[1:])

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
        return super().__getitem__(key)

    def __repr__(self) -> str:
        return f"TopK(shape={self.shape}, k={self.values.shape[1]})"


class BoxCandidates(_DenseView):
    """A GFL head's candidates, decoded on the GPU for every stride of a batch at once.

    One record per (cell, class) whose score is above the filter's threshold (or per cell, its best
    class), in (frame, cell, class) order: ``frame`` (k,) int64, ``cell`` (k,) int64 numbered across the
    strides, ``cls`` (k,) int64, ``score`` (k,) float32, ``box`` (k, 4) float32 x1, y1, x2, y2 in input
    pixels; ``nonfinite`` (N,) bool marks frames where a score or a kept cell's distribution was NaN or
    infinite. The same records stand under every stride's score output; this one's logical shape is
    ``shape`` (N, cells, C), its cells ``first`` .. ``first + cells``. ``np.asarray`` gives that dense
    array: the kept scores in place, every other value zero, NaN across a frame marked non-finite.
    ``final``: the device also ran NMS and the per-frame limits (the filter's ``nms_iou``): the records
    are each frame's detections, best first.
    """

    __slots__ = ("box", "cell", "cls", "final", "first", "frame", "nonfinite", "score", "shape")

    def __init__(
        self,
        frame: np.ndarray,
        cell: np.ndarray,
        cls: np.ndarray,
        score: np.ndarray,
        box: np.ndarray,
        nonfinite: np.ndarray,
        shape: tuple[int, int, int],
        first: int,
        final: bool = False,
    ) -> None:
        k = frame.shape[0]
        if cell.shape != (k,) or cls.shape != (k,) or score.shape != (k,) or box.shape != (k, 4):
            raise ValueError(f"inconsistent box candidates: {k} frames, cells {cell.shape}, boxes {box.shape}")
        if len(shape) != 3 or nonfinite.shape != (shape[0],):
            raise ValueError(f"inconsistent box candidates: shape {shape}, nonfinite {nonfinite.shape}")
        self.frame, self.cell, self.cls, self.score, self.box = frame, cell, cls, score, box
        self.nonfinite, self.shape, self.first, self.final = nonfinite, shape, first, final

    def all_finite(self) -> bool:
        return not self.nonfinite.any()

    def _dense(self) -> np.ndarray:
        out = np.zeros(self.shape, np.float32)
        mine = (self.cell >= self.first) & (self.cell < self.first + self.shape[1])
        out[self.frame[mine], self.cell[mine] - self.first, self.cls[mine]] = self.score[mine]
        out[self.nonfinite] = np.nan
        return out

    def __repr__(self) -> str:
        return f"BoxCandidates(shape={self.shape}, records={self.frame.shape[0]}, final={self.final})"


class ConsumedOutput(_DenseView):
    """An output the GPU used up and did not copy back (the box distributions :class:`BoxCandidates`
    were decoded from). ``np.asarray`` gives zeros of its logical ``shape`` and ``dtype`` (NaN across the
    frames ``nonfinite`` marks), so shape checks and health checks still see the declared output."""

    __slots__ = ("dtype", "nonfinite", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: Any, nonfinite: np.ndarray) -> None:
        self.shape, self.dtype, self.nonfinite = shape, np.dtype(dtype), nonfinite

    def all_finite(self) -> bool:
        return not self.nonfinite.any()

    def _dense(self) -> np.ndarray:
        out = np.zeros(self.shape, self.dtype)
        out[self.nonfinite] = np.nan
        return out

    def __repr__(self) -> str:
        return f"ConsumedOutput(shape={self.shape}, dtype={self.dtype})"


def all_finite(value: Any) -> bool:
    """Whether a model output holds no NaN or infinity. The GPU filters' forms answer from what they
    carry, without building the dense tensor (tens of MB a batch for a detector's scores): the health
    checks of a swap run this on every batch of its window."""
    check = getattr(value, "all_finite", None)
    if check is not None:
        return bool(check())
    arr = np.asarray(value)
    return arr.dtype.kind != "f" or bool(np.isfinite(arr).all())
