"""A frame's detections held as arrays: :class:`Detections`, a sequence of
:class:`~edgefleet.sdk.Detection` records made only when something reads them.

A pipeline at 64 streams on a GPU delivers thousands of frames a second, each with ten or so objects; a
record per object costs the result thread (and the GIL every other thread needs) more than the rest of a
frame's delivery. The decoders therefore hand over one array per field (boxes, scores, class numbers,
and, once a ``track`` stage ran, track ids, ages and states); counting, tracking, zones and the analytics
worker process read those arrays, and a sink or an app that iterates the detections gets the records,
built once and kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from ._results import Detection, Keypoint, Mask

__all__ = [
    "TRACK_NEW",
    "TRACK_STATES",
    "Detections",
    "label_counts",
    "label_table",
    "retrack_in_place",
    "retracked",
    "track_codes",
    "unchecked",
]

#: a track state's code in :attr:`Detections.track_states` → its name on a :class:`Detection`
TRACK_STATES: dict[int, str] = {-1: "", 0: "tentative", 1: "tracked", 3: "new"}
TRACK_NEW = 3
_CODES = {name: code for code, name in TRACK_STATES.items()}


def track_codes(states: Sequence[str]) -> np.ndarray:
    """Track state names → their codes (``TRACK_STATES``)."""
    return np.array([_CODES[s] for s in states], np.int8)


class Detections(Sequence[Detection]):
    """One frame's detections: ``boxes`` (N, 4) x1, y1, x2, y2 in source pixels, ``scores`` (N,),
    ``class_ids`` (N,); each one's label is ``labels[label_index[i]]`` (``label_index`` defaults to the
    class numbers: ``labels`` is then the model's, by class number); after a ``track`` stage
    ``track_ids`` (N,, 0: none), ``track_ages`` and ``track_states`` (codes, :data:`TRACK_STATES`).
    Masks and keypoints, where the model has them, are kept as records.

    It reads like the tuple of :class:`Detection` it replaces (``len``, indexing, iteration, ``==`` with a
    tuple of records); the arrays are read-only.
    """

    __slots__ = (
        "_ages", "_boxes", "_classes", "_ids", "_index", "_items", "_keypoints", "_labels", "_masks", "_scores",
        "_states",
    )  # fmt: skip

    def __init__(
        self,
        boxes: np.ndarray,
        scores: np.ndarray,
        class_ids: np.ndarray,
        labels: Sequence[str],
        *,
        label_index: np.ndarray | None = None,
        track: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        masks: Sequence[Mask | None] | None = None,
        keypoints: Sequence[tuple[Keypoint, ...]] | None = None,
    ) -> None:
        n = len(scores)
        if boxes.shape != (n, 4) or len(class_ids) != n:
            raise ValueError(f"detections: boxes {boxes.shape}, scores ({n},), classes ({len(class_ids)},) disagree")
        self._boxes, self._scores, self._classes = boxes, scores, class_ids
        self._labels = labels if isinstance(labels, tuple) else tuple(labels)
        self._index = class_ids if label_index is None else label_index
        if len(self._index) != n:
            raise ValueError("detections: one label index per detection")
        if n and (int(self._index.min()) < 0 or int(self._index.max()) >= len(self._labels)):
            raise ValueError(f"detections: a label index outside the {len(self._labels)} labels")
        if track is None:
            self._ids = self._ages = self._states = None
        else:
            self._ids, self._ages, self._states = track
            if not len(self._ids) == len(self._ages) == len(self._states) == n:
                raise ValueError("detections: track ids, ages and states must be one per detection")
        self._masks = masks
        self._keypoints = keypoints
        self._items: tuple[Detection, ...] | None = None

    @classmethod
    def from_records(cls, records: Sequence[Detection]) -> Detections:
        """The arrays of records (an analytics stage given plain tuples of :class:`Detection`); a
        :class:`Detections` is returned as it is."""
        if isinstance(records, Detections):
            return records
        table: dict[str, int] = {}
        index = np.array([table.setdefault(d.label, len(table)) for d in records], np.int64)
        n = len(records)
        track = None
        if any(d.track_state for d in records):
            track = (
                np.array([d.track_id or 0 for d in records], np.int64),
                np.array([d.track_age for d in records], np.int64),
                track_codes([d.track_state for d in records]),
            )
        has_masks = any(d.mask is not None for d in records)
        has_points = any(d.keypoints for d in records)
        out = cls(
            np.array([d.box for d in records], np.float64).reshape(n, 4),
            np.array([d.score for d in records], np.float64),
            np.array([d.class_id for d in records], np.int64),
            tuple(table),
            label_index=index,
            track=track,
            masks=[d.mask for d in records] if has_masks else None,
            keypoints=[d.keypoints for d in records] if has_points else None,
        )
        out._items = tuple(records)
        return out

    # --- the arrays ------------------------------------------------------------------------------
    @property
    def boxes(self) -> np.ndarray:
        return self._boxes

    @property
    def scores(self) -> np.ndarray:
        return self._scores

    @property
    def class_ids(self) -> np.ndarray:
        return self._classes

    @property
    def label_table(self) -> tuple[str, ...]:
        """The labels :attr:`label_index` points into (for a decoder's output: the model's labels)."""
        return self._labels

    @property
    def label_index(self) -> np.ndarray:
        """Each detection's label, as its index in :attr:`label_table`."""
        return self._index

    @property
    def tracked(self) -> bool:
        """Whether a ``track`` stage set the track columns."""
        return self._ids is not None

    @property
    def track_ids(self) -> np.ndarray:
        return self._ids if self._ids is not None else np.zeros(len(self._scores), np.int64)

    @property
    def track_ages(self) -> np.ndarray:
        return self._ages if self._ages is not None else np.zeros(len(self._scores), np.int64)

    @property
    def track_states(self) -> np.ndarray:
        return self._states if self._states is not None else np.full(len(self._scores), -1, np.int8)

    @property
    def masks(self) -> Sequence[Mask | None] | None:
        return self._masks

    @property
    def keypoints(self) -> Sequence[tuple[Keypoint, ...]] | None:
        return self._keypoints

    def labels(self) -> list[str]:
        """Each detection's label."""
        table = self._labels
        return [table[i] for i in self._index.tolist()]

    def with_tracks(self, ids: np.ndarray, ages: np.ndarray, states: np.ndarray) -> Detections:
        """These detections with their track columns set (every other column kept)."""
        if not len(ids) == len(ages) == len(states) == len(self._scores):
            raise ValueError("detections: track ids, ages and states must be one per detection")
        return retracked(self, ids, ages, states)

    # --- the sequence of records -----------------------------------------------------------------
    def records(self) -> tuple[Detection, ...]:
        """The detections as records (made on the first call, then kept)."""
        items = self._items
        if items is None:
            items = self._items = self._make()
        return items

    def _make(self) -> tuple[Detection, ...]:
        labels = self.labels()
        boxes = self._boxes.tolist()
        scores = self._scores.tolist()
        classes = self._classes.tolist()
        masks, points = self._masks, self._keypoints
        if self._ids is None and masks is None and points is None:
            return tuple(
                Detection((b[0], b[1], b[2], b[3]), s, c, name)
                for b, s, c, name in zip(boxes, scores, classes, labels, strict=True)
            )
        n = len(classes)
        ids = self._ids.tolist() if self._ids is not None else [0] * n
        ages = self._ages.tolist() if self._ages is not None else [0] * n
        states = self._states.tolist() if self._states is not None else [-1] * n
        return tuple(
            Detection(
                (b[0], b[1], b[2], b[3]),
                s,
                c,
                labels[i],
                ids[i] or None,
                ages[i],
                TRACK_STATES[states[i]],
                masks[i] if masks is not None else None,
                points[i] if points is not None else (),
            )
            for i, (b, s, c) in enumerate(zip(boxes, scores, classes, strict=True))
        )

    def __len__(self) -> int:
        return len(self._scores)

    def __bool__(self) -> bool:
        return len(self._scores) > 0

    @overload
    def __getitem__(self, index: int) -> Detection: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Detection, ...]: ...
    def __getitem__(self, index: int | slice) -> Detection | tuple[Detection, ...]:
        return self.records()[index]

    def __iter__(self) -> Iterator[Detection]:
        return iter(self.records())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Detections, tuple, list)):
            return self.records() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.records())

    def __add__(self, other: Sequence[Detection]) -> tuple[Detection, ...]:
        return self.records() + tuple(other)

    def __radd__(self, other: Sequence[Detection]) -> tuple[Detection, ...]:
        return tuple(other) + self.records()

    def __repr__(self) -> str:
        return f"Detections({list(self.records())!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        track = None if self._ids is None else (self._ids, self._ages, self._states)
        index = None if self._index is self._classes else self._index
        state = (self._boxes, self._scores, self._classes, self._labels, index, track, self._masks, self._keypoints)
        return (_rebuild, state)


def unchecked(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    labels: tuple[str, ...],
    index: np.ndarray | None,
    track: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    masks: Sequence[Mask | None] | None = None,
    keypoints: Sequence[tuple[Keypoint, ...]] | None = None,
) -> Detections:
    """A :class:`Detections` from columns known to agree (a decoder's, the analytics process's): what the
    constructor makes, without its checks (they cost more than the rest of a frame's delivery)."""
    d = object.__new__(Detections)
    d._boxes, d._scores, d._classes, d._labels = boxes, scores, classes, labels
    d._index = classes if index is None else index
    if track is None:
        d._ids = d._ages = d._states = None
    else:
        d._ids, d._ages, d._states = track
    d._masks, d._keypoints, d._items = masks, keypoints, None
    return d


_rebuild = unchecked  # what a pickled Detections is made again with


def retracked(d: Detections, ids: np.ndarray, ages: np.ndarray, states: np.ndarray) -> Detections:
    """:meth:`Detections.with_tracks` without its checks (columns known to agree: the analytics
    process's answer)."""
    new = object.__new__(Detections)
    new._boxes, new._scores, new._classes, new._labels, new._index = (
        d._boxes,
        d._scores,
        d._classes,
        d._labels,
        d._index,
    )
    new._ids, new._ages, new._states = ids, ages, states
    new._masks, new._keypoints, new._items = d._masks, d._keypoints, None
    return new


def retrack_in_place(d: Detections, ids: np.ndarray, ages: np.ndarray, states: np.ndarray) -> None:
    """:func:`retracked` into ``d`` itself: only for detections nobody but their maker has seen (a
    result not yet delivered, its answer from the analytics process), which are read-only from then on."""
    d._ids, d._ages, d._states, d._items = ids, ages, states, None


def label_table(labels: tuple[str, ...], classes: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    """A decoder's labels and class numbers → (label table, label index): the class numbers themselves
    when every one names a label, else a table that names the others by their number (as
    ``DecodeContext.label`` does)."""
    if not classes.size or (int(classes.min()) >= 0 and int(classes.max()) < len(labels)):
        return labels, classes
    names = [labels[c] if 0 <= c < len(labels) else str(c) for c in classes.tolist()]
    table: dict[str, int] = {}
    index = np.array([table.setdefault(n, len(table)) for n in names], np.int64)
    return tuple(table), index


def label_counts(frames: Iterable[Sequence[Detection]]) -> Counter[str]:
    """Detections per label over many frames' detections (arrays counted in one call per model's labels;
    plain records one by one)."""
    out: Counter[str] = Counter()
    columns: dict[int, tuple[tuple[str, ...], list[np.ndarray]]] = {}
    for dets in frames:
        if isinstance(dets, Detections):
            if len(dets):
                columns.setdefault(id(dets.label_table), (dets.label_table, []))[1].append(dets.label_index)
        else:
            for d in dets:
                out[d.label] += 1
    for labels, parts in columns.values():
        index = np.concatenate(parts) if len(parts) > 1 else parts[0]
        found, counts = np.unique(index, return_counts=True)
        for i, n in zip(found.tolist(), counts.tolist(), strict=True):
            out[labels[i]] += n
    return out
