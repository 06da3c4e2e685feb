"""Detection decoders: Ultralytics YOLOv8/YOLO11 export layout and NanoDet's GFL head."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator

from .._detections import label_table, unchecked
from .._errors import DecoderError
from .._results import Keypoint, Mask
from .._sparse import BoxCandidates, CandidateFilter, CandidateRows
from .._transform import Transform
from ._base import BatchColumns, DecodeContext, Decoded, DecodedBatch, Decoder, DecoderConfig
from ._nms import nms_groups

__all__ = ["GFL_CAPACITY", "NanoDetDecoder", "NanoDetParams", "YoloCandidates", "YoloDecoder", "YoloParams"]

#: box records per frame a GPU backend returns for a GFL head (all strides); a frame with more gets the
#: full tensors, decoded on the host
GFL_CAPACITY = 4096


class _DetectionParams(DecoderConfig):
    task: ClassVar[str | None] = "detection"
    score_threshold: float = Field(0.25, ge=0, le=1)
    iou_threshold: float = Field(0.45, ge=0, le=1)
    max_detections: int = Field(100, ge=1, le=10_000)
    pre_nms_top_k: int = Field(1000, ge=1)
    classes: tuple[str, ...] | None = Field(None, description="Keep only these labels (all when unset)")


def _class_filter(ctx: DecodeContext, p: _DetectionParams) -> np.ndarray | None:
    """A boolean mask over class ids for ``classes``, or None to keep every class."""
    if p.classes is None:
        return None
    unknown = sorted(set(p.classes) - set(ctx.labels))
    if unknown:
        raise DecoderError(f"{ctx.manifest.ref}: decoder.classes names unknown labels {unknown}")
    return np.isin(np.array(ctx.labels), p.classes)


def _any_above(scores: np.ndarray, threshold: float) -> np.ndarray:
    """(N, cells, C) float32 -> (N, cells) bool: does any class pass ``threshold``? The comparison's bytes
    are reduced 8 at a time (a uint64 view) when C allows (NanoDet-m, batch of 32 on the clip: the whole
    decode 14.6 -> 10.8 ms per batch against ``scores.max(axis=2) > threshold``, same detections)."""
    above = scores > threshold
    c = above.shape[-1]
    if c % 8 == 0 and above.flags.c_contiguous:
        return np.asarray(above.view(np.uint64).reshape(*above.shape[:-1], c // 8).any(axis=-1))
    return np.asarray(above.any(axis=-1))


def _select(
    p: _DetectionParams,
    keep: np.ndarray | None,
    frame: np.ndarray,
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    n: int,
    agnostic: bool = False,
) -> np.ndarray:
    """Candidates of a whole batch (input pixels; ``frame`` says whose) -> class filter -> each frame's
    best ``pre_nms_top_k`` -> NMS per frame and class (per frame only when ``agnostic``) -> each frame's
    best ``max_detections``. Returns the indices of the candidates kept, by frame ascending and best first
    within a frame (ties in candidate order). The whole batch goes through each step at once: a few dozen
    numpy calls a batch rather than as many per frame."""
    idx = np.arange(frame.size)
    if keep is not None:
        idx = idx[keep[classes]]
    if idx.size == 0:
        return idx
    idx = idx[np.lexsort((-scores[idx], frame[idx]))]  # by frame, best first within it
    f = frame[idx]
    starts = np.searchsorted(f, np.arange(n + 1), side="left")
    rank = np.arange(idx.size) - starts[f]  # place within its frame, best first
    if (rank >= p.pre_nms_top_k).any():
        idx = idx[rank < p.pre_nms_top_k]
        f = frame[idx]
    c = classes[idx]
    groups = f.astype(np.int64) if agnostic else f.astype(np.int64) * (int(c.max(initial=0)) + 1) + c
    idx = idx[nms_groups(boxes[idx], scores[idx], groups, p.iou_threshold, p.max_detections)]
    f = frame[idx]
    starts = np.searchsorted(f, np.arange(n + 1), side="left")
    if (np.diff(starts) > p.max_detections).any():
        idx = idx[np.arange(idx.size) - starts[f] < p.max_detections]
    kept: np.ndarray = idx
    return kept


def _per_frame(
    ctx: DecodeContext,
    p: _DetectionParams,
    keep: np.ndarray | None,
    frame: np.ndarray,
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    transforms: Sequence[Transform],
) -> list[Decoded]:
    """:func:`_select` then :func:`_finish`: one :class:`Decoded` per frame, boxes in source pixels."""
    idx = _select(p, keep, frame, boxes, scores, classes, len(transforms))
    return _finish(ctx, frame[idx], boxes[idx], scores[idx], classes[idx], transforms)


def _finish(
    ctx: DecodeContext,
    frame: np.ndarray,
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    transforms: Sequence[Transform],
    masks: Sequence[Mask | None] | None = None,
    keypoints: Sequence[tuple[Keypoint, ...]] | None = None,
) -> DecodedBatch:
    """A batch's detections (``frame`` ascending, each frame's best first) -> source pixels -> one
    :class:`Decoded` per frame, views of the batch's columns; ``masks`` / ``keypoints``, one per
    detection, are attached as they are."""
    n = len(transforms)
    if frame.size == 0:
        empty = np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)
        return DecodedBatch([Decoded() for _ in range(n)], BatchColumns(*empty, ctx.labels, empty[2], [0] * (n + 1)))
    starts = np.searchsorted(frame, np.arange(n + 1), side="left").tolist()
    src = _to_source(boxes, frame, transforms)
    for a in (src, scores, classes):
        a.setflags(write=False)
    labels, index = label_table(ctx.labels, classes)
    columns = BatchColumns(src, scores, classes, labels, index, starts)
    return DecodedBatch(
        columns=columns,
        items=[
            Decoded(
                detections=unchecked(
                    src[lo:hi],
                    scores[lo:hi],
                    classes[lo:hi],
                    labels,
                    None if index is classes else index[lo:hi],  # None: the class numbers index the labels
                    None,
                    None if masks is None else masks[lo:hi],
                    None if keypoints is None else keypoints[lo:hi],
                )
            )
            for lo, hi in itertools.pairwise(starts)
        ],
    )


def _to_source(boxes: np.ndarray, frame: np.ndarray, transforms: Sequence[Transform]) -> np.ndarray:
    """:meth:`Transform.to_source` for a batch's boxes, each by its frame's transform, in one pass (in
    float32 like it, so the two agree to the bit)."""
    t = np.array([(x.pad_x, x.pad_y, x.scale_x, x.scale_y, x.src_w, x.src_h) for x in transforms], np.float32)[frame]
    out = np.empty(boxes.shape, np.float32)
    out[:, 0::2] = (boxes[:, 0::2] - t[:, 0:1]) / t[:, 2:3]
    out[:, 1::2] = (boxes[:, 1::2] - t[:, 1:2]) / t[:, 3:4]
    np.clip(out[:, 0::2], 0, t[:, 4:5], out=out[:, 0::2])
    np.clip(out[:, 1::2], 0, t[:, 5:6], out=out[:, 1::2])
    return out


def _declared(ctx: DecodeContext, name: str) -> tuple[int, ...] | None:
    """The shape of output ``name`` (-1: dynamic): the model's where known, else the manifest's; or None."""
    return ctx.output_shape(name)


def _check_label_count(ctx: DecodeContext, output: str, classes: set[int]) -> None:
    """The labels must name every class the head scores: 40 labels for an 80-class head labelled class 56
    as '56', silently. ``classes``: what the declared shape allows (two readings for an auto layout)."""
    n = len(ctx.labels)
    if n and classes and n not in classes:
        want = " or ".join(str(c) for c in sorted(classes))
        raise DecoderError(f"{ctx.manifest.ref}: {n} labels, but output {output!r} scores {want} classes")


class YoloParams(_DetectionParams):
    """``decoder: {type: yolo, ...}``: Ultralytics YOLOv8/YOLO11 detection exports.

    Defaults are Ultralytics' own post-processing (``predict`` mode: ``conf`` 0.25, ``iou`` 0.7,
    ``max_det`` 300, ``agnostic_nms`` False; ``ultralytics.utils.nms.non_max_suppression``: at most
    ``max_nms`` 30000 boxes, the most confident, go into NMS), so an export gives the detections
    ``YOLO(model).predict()`` gives."""

    type: Literal["yolo"] = "yolo"
    score_threshold: float = Field(0.25, ge=0, le=1)
    iou_threshold: float = Field(0.7, ge=0, le=1)
    max_detections: int = Field(300, ge=1, le=10_000)
    pre_nms_top_k: int = Field(30_000, ge=1)
    agnostic: bool = Field(False, description="NMS across classes (Ultralytics' agnostic_nms)")
    output: str | None = Field(None, description="Output tensor name (default: the first output)")
    layout: Literal["auto", "channels_first", "channels_last"] = "auto"


class YoloCandidates:
    """A batch's YOLO candidates: each anchor whose best class score passes the threshold, with its
    frame, anchor column (in ``out``, the output as decoded), xyxy box in input pixels, score and class.
    ``columns(rows)`` gathers further rows of ``out`` (mask coefficients, keypoints) for some of them."""

    __slots__ = ("anchor", "boxes", "channels_first", "classes", "frame", "num_classes", "out", "scores")

    def __init__(self, out: np.ndarray, channels_first: bool, classes: int, threshold: float) -> None:
        self.out, self.channels_first, self.num_classes = out, channels_first, classes
        cls = out[:, 4 : 4 + classes, :] if channels_first else out[:, :, 4 : 4 + classes]
        best = cls.max(axis=1 if channels_first else 2)  # (N, anchors)
        self.frame, self.anchor = np.nonzero(best > threshold)
        if channels_first:
            xywh = out[self.frame, :4, self.anchor]
            self.classes = cls[self.frame, :, self.anchor].argmax(axis=1)
        else:
            xywh = out[self.frame, self.anchor, :4]
            self.classes = cls[self.frame, self.anchor, :].argmax(axis=1)
        self.scores = best[self.frame, self.anchor]
        self.boxes = np.empty_like(xywh)
        self.boxes[:, 0] = xywh[:, 0] - xywh[:, 2] / 2
        self.boxes[:, 1] = xywh[:, 1] - xywh[:, 3] / 2
        self.boxes[:, 2] = xywh[:, 0] + xywh[:, 2] / 2
        self.boxes[:, 3] = xywh[:, 1] + xywh[:, 3] / 2

    def columns(self, idx: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the output for candidates ``idx``: (len(idx), stop - start)."""
        f, a = self.frame[idx], self.anchor[idx]
        if self.channels_first:
            return np.asarray(self.out[f, start:stop, a])
        return np.asarray(self.out[f, a, start:stop])


class YoloDecoder(Decoder):
    """Ultralytics export: (N, 4 + classes [+ extra], anchors), boxes cx, cy, w, h in input pixels, class
    scores already sigmoid-ed, no objectness. (N, anchors, 4 + classes) is accepted too. ``extra``: rows
    after the class scores that a subclass reads (mask coefficients, keypoints); 0 here."""

    kind = "yolo"

    def __init__(self, config: YoloParams, ctx: DecodeContext) -> None:
        self.ctx = ctx
        self.p = config
        self.keep = _class_filter(ctx, self.p)
        self.output = self.p.output or ctx.output_names[0]
        if self.output not in ctx.output_names:
            raise DecoderError(f"{ctx.manifest.ref}: {self.kind} decoder output {self.output!r} is not a model output")
        self.extra = self._extra_rows()
        shape = _declared(ctx, self.output)
        if shape is not None and len(shape) == 3:
            dims = {"channels_first": (shape[1],), "channels_last": (shape[2],)}.get(self.p.layout, shape[1:])
            _check_label_count(ctx, self.output, {d - 4 - self.extra for d in dims if d > 4 + self.extra})

    def _extra_rows(self) -> int:
        return 0

    def candidate_filters(self) -> list[CandidateFilter]:
        t = self.p.score_threshold
        return [CandidateFilter(self.output, t, "channels_first", classes=len(self.ctx.labels), extra=self.extra)]

    def candidates(self, outputs: Mapping[str, np.ndarray]) -> YoloCandidates:
        raw = outputs[self.output]
        # GPU-filtered: only the candidate columns, in anchor order (the others cannot pass the threshold)
        out = raw.data if isinstance(raw, CandidateRows) else np.asarray(raw)
        shape = raw.shape if isinstance(raw, CandidateRows) else out.shape
        if len(shape) != 3:
            raise DecoderError(f"{self.kind} decoder expects a 3-D output, got shape {shape}")
        n_labels, extra = len(self.ctx.labels), self.extra
        channels_first = self.p.layout == "channels_first" or (
            self.p.layout == "auto" and (shape[1] == 4 + n_labels + extra or (n_labels == 0 and shape[1] < shape[2]))
        )
        if out.dtype != np.float32:
            out = out.astype(np.float32)  # scores compared in float32, as the frame-at-a-time decoder did
        width = shape[1] if channels_first else shape[2]
        if width <= 4 + extra:
            raise DecoderError(f"{self.ctx.manifest.ref}: output {self.output!r} of shape {shape} has no class scores")
        return YoloCandidates(out, channels_first, width - 4 - extra, self.p.score_threshold)

    def select(self, c: YoloCandidates, n: int) -> np.ndarray:
        return _select(self.p, self.keep, c.frame, c.boxes, c.scores, c.classes, n, self.p.agnostic)

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        c = self.candidates(outputs)
        idx = self.select(c, len(transforms))
        return _finish(self.ctx, c.frame[idx], c.boxes[idx], c.scores[idx], c.classes[idx], transforms)


class NanoDetParams(_DetectionParams):
    """``decoder: {type: nanodet, ...}``: NanoDet's GFL head."""

    type: Literal["nanodet"] = "nanodet"
    multi_label: bool = Field(True, description="Every (cell, class) above the threshold is a candidate")
    strides: tuple[int, ...] = Field(
        (8, 16, 32), min_length=1, description="One per head level; level s reads outputs cls_<s> and reg_<s>"
    )
    reg_max: int = Field(7, ge=1)
    cls_prefix: str = "cls_"
    reg_prefix: str = "reg_"

    @field_validator("strides")
    @classmethod
    def _check_strides(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(s < 1 for s in v):
            raise ValueError(f"strides must be positive, got {list(v)}")
        if len(set(v)) != len(v):  # one head level decoded twice: every detection of it twice
            raise ValueError(f"strides must differ, got {list(v)}")
        return v


def _check_cells(ctx: DecodeContext, name: str, stride: int, grid: tuple[int, int]) -> None:
    """A GFL output's declared shape must be (N, cells, C) with the cells that ``stride`` makes over the
    input: a strides list or input size that does not match the model fails here, at load, rather than
    at the first frame."""
    shape = _declared(ctx, name)
    if shape is None:
        return
    if len(shape) != 3:
        raise DecoderError(f"{ctx.manifest.ref}: output {name!r} has shape {list(shape)}; nanodet reads (N, cells, C)")
    gh, gw = grid
    if shape[1] > 0 and shape[1] != gh * gw:
        spec = ctx.manifest.input
        raise DecoderError(
            f"{ctx.manifest.ref}: output {name!r} has {shape[1]} cells, but stride {stride} over the "
            f"{spec.width}x{spec.height} input makes {gw} x {gh} = {gh * gw} (do the strides and the input "
            "size match the model?)"
        )


def _by_stride(name: str) -> tuple[int, str]:
    """``cls_8`` before ``cls_16``: head outputs in the order of their strides."""
    digits = name[len(name.rstrip("0123456789")) :]
    return int(digits or 0), name


class NanoDetDecoder(Decoder):
    """NanoDet GFL head: per stride, class scores (N, cells, C) (sigmoid applied) and box distributions
    (N, cells, 4 * (reg_max + 1)). Each side's distance from the cell centre ((i + 0.5) · stride) is the
    expectation of the softmax over the bins, times the stride.

    On a GPU backend that takes its ``gfl`` filters the boxes, NMS and limits are done on the device and
    ``decode`` only maps each frame's detections to source pixels (:class:`BoxCandidates`). From full
    tensors (CPU, TensorRT, or a frame with too many candidates) the strides are decoded together: the
    cells above the threshold are put side by side once, and every step after that is one numpy call over
    all of them (a third of the calls of going stride by stride)."""

    def __init__(self, config: NanoDetParams, ctx: DecodeContext) -> None:
        self.ctx = ctx
        self.p = config
        self.keep = _class_filter(ctx, self.p)
        spec = ctx.manifest.input
        if spec.height < 1 or spec.width < 1:
            raise DecoderError(
                f"{ctx.manifest.ref}: nanodet needs a fixed input height and width (each stride's cells "
                f"follow from them), got input shape {list(spec.shape)}"
            )
        self._levels: list[tuple[int, str, str, int, int, int]] = []  # stride, outputs, first cell, cells, grid w
        centres, strides = [], []
        first = 0
        for s in self.p.strides:
            cls_name, reg_name = f"{self.p.cls_prefix}{s}", f"{self.p.reg_prefix}{s}"
            gh, gw = -(-spec.height // s), -(-spec.width // s)
            self._check_level(s, cls_name, reg_name, (gh, gw))
            ys, xs = np.mgrid[0:gh, 0:gw]
            centres.append(np.stack([(xs.ravel() + 0.5) * s, (ys.ravel() + 0.5) * s], axis=1).astype(np.float32))
            strides.append(np.full(gh * gw, s, np.float32))
            self._levels.append((s, cls_name, reg_name, first, gh * gw, gw))
            first += gh * gw
        self._check_every_output_read()
        self._centres = np.concatenate(centres)  # (every cell of every stride, 2)
        self._strides = np.concatenate(strides)[:, None]
        self._bins = np.arange(self.p.reg_max + 1, dtype=np.float32)

    def _check_level(self, stride: int, cls_name: str, reg_name: str, grid: tuple[int, int]) -> None:
        """One stride's outputs exist, with its cells, a score per label and reg_max's box bins."""
        ctx = self.ctx
        for name in (cls_name, reg_name):
            if name not in ctx.output_names:
                raise DecoderError(f"{ctx.manifest.ref}: nanodet decoder needs an output named {name!r}")
            _check_cells(ctx, name, stride, grid)
        cls_shape, reg_shape = _declared(ctx, cls_name), _declared(ctx, reg_name)
        if cls_shape and cls_shape[-1] > 0:
            _check_label_count(ctx, cls_name, {cls_shape[-1]})
        bins = 4 * (self.p.reg_max + 1)
        if reg_shape and reg_shape[-1] > 0 and reg_shape[-1] != bins:
            raise DecoderError(
                f"{ctx.manifest.ref}: output {reg_name!r} has {reg_shape[-1]} box bins; reg_max "
                f"{self.p.reg_max} needs 4 x {self.p.reg_max + 1} = {bins}"
            )

    def _check_every_output_read(self) -> None:
        """Every cls_<n>/reg_<n> output of the model (and of the manifest) has its stride: a head output
        that no stride reads lost its detections without a word (a 4-level head under 3 strides)."""
        ctx, p = self.ctx, self.p
        head = {
            name
            for name in (*ctx.output_names, *(o.name for o in ctx.manifest.outputs))
            for prefix in (p.cls_prefix, p.reg_prefix)
            if name.startswith(prefix) and name[len(prefix) :].isdigit()
        }
        unused = sorted(head - {name for lvl in self._levels for name in lvl[1:3]}, key=_by_stride)
        if unused:
            read = 2 * len(self._levels)
            raise DecoderError(
                f"{ctx.manifest.ref}: outputs {unused} are read by no stride in {list(p.strides)} (the "
                f"strides read {read} of the head's {read + len(unused)} outputs)"
            )

    def candidate_filters(self) -> list[CandidateFilter]:
        """Each stride decoded on the GPU (a backend that cannot gets the full tensors), then NMS and the
        per-frame limits there too: each frame's detections come back, every stride's together (or, when
        a frame has too many records for the device NMS, the records, finished here)."""
        p = self.p
        return [
            CandidateFilter(
                cls,
                p.score_threshold,
                "gfl",
                companion=reg,
                capacity=GFL_CAPACITY,
                stride=s,
                grid_width=gw,
                first=first,
                bins=p.reg_max + 1,
                multi_label=p.multi_label,
                levels=len(self._levels),
                nms_iou=p.iou_threshold,
                pre_nms_top_k=p.pre_nms_top_k,
                max_detections=p.max_detections,
                keep_classes=None if self.keep is None else tuple(int(c) for c in np.flatnonzero(self.keep)),
            )
            for s, cls, reg, first, _, gw in self._levels
        ]

    def _cells(self, outputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The cells of the full tensors, over every stride, with a class score above the threshold: their
        frame, cell number (strides numbered one after the other), scores (k, C) as float32 and box
        distributions (k, R). Per frame: stride by stride, cells in order."""
        bins, t = self.p.reg_max + 1, self.p.score_threshold
        frames, cells, scores, dists = [], [], [], []
        for _, cls_name, reg_name, first, count, _ in self._levels:
            cls, reg = np.asarray(outputs[cls_name]), np.asarray(outputs[reg_name])
            if cls.ndim != 3 or cls.shape[1] != count:
                raise DecoderError(
                    f"{self.ctx.manifest.ref}: {cls_name} has shape {cls.shape}, expected (N, {count}, C)"
                )
            if reg.ndim != 3 or reg.shape[:2] != cls.shape[:2] or reg.shape[2] != 4 * bins:
                raise DecoderError(
                    f"{self.ctx.manifest.ref}: {reg_name} has shape {reg.shape}, expected (N, {count}, {4 * bins})"
                )
            if cls.dtype != np.float32:
                cls = cls.astype(np.float32)
            # any class above the threshold (a fast reduction over the contiguous class axis); the
            # (cell, class) pairs are taken among these few cells, for every stride at once, by decode()
            fi, ci = np.nonzero(_any_above(cls, t)) if self.p.multi_label else np.nonzero(cls.max(axis=2) > t)
            if fi.size == 0:
                continue
            frames.append(fi)
            cells.append(ci + first)
            scores.append(cls[fi, ci])
            dists.append(reg[fi, ci])
        if not frames:
            empty = np.zeros(0, np.int64)
            return empty, empty, np.zeros((0, 0), np.float32), np.zeros((0, 4 * bins), np.float32)
        if len(frames) == 1:
            return frames[0], cells[0], scores[0], dists[0]
        return np.concatenate(frames), np.concatenate(cells), np.concatenate(scores), np.concatenate(dists)

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        gpu = [outputs[cls_name] for _, cls_name, _, _, _, _ in self._levels]
        if all(isinstance(b, BoxCandidates) for b in gpu):  # decoded on the GPU: only NMS and the rest left
            b = gpu[0]
            assert isinstance(b, BoxCandidates)
            if b.shape[0] != len(transforms):
                raise DecoderError(
                    f"{self.ctx.manifest.ref}: {b.shape[0]} frames of candidates, {len(transforms)} transforms"
                )
            if b.final:  # the device ran NMS and the limits too: these are the detections
                return _finish(self.ctx, b.frame, b.box, b.score, b.cls, transforms)
            return _per_frame(self.ctx, self.p, self.keep, b.frame, b.box, b.score, b.cls, transforms)
        bins = self.p.reg_max + 1
        cell_frame, cell, sub, reg_rows = self._cells(outputs)
        if cell_frame.size == 0:
            return [Decoded() for _ in transforms]
        if self.p.multi_label:  # every (cell, class) pair above the threshold
            rows, classes = np.nonzero(sub > self.p.score_threshold)
            scores = sub[rows, classes]
        else:
            rows = np.arange(cell_frame.size)
            classes = sub.argmax(axis=1)
            scores = sub[rows, classes]
        frame, cells = cell_frame[rows], cell[rows]
        reg = reg_rows[rows].astype(np.float32, copy=False).reshape(-1, 4, bins)
        reg = np.exp(reg - reg.max(axis=2, keepdims=True))
        reg /= reg.sum(axis=2, keepdims=True)
        dist = (reg @ self._bins) * self._strides[cells]  # (k, 4): left, top, right, bottom
        c = self._centres[cells]
        boxes = np.concatenate([c - dist[:, :2], c + dist[:, 2:]], axis=1)
        return _per_frame(self.ctx, self.p, self.keep, frame, boxes, scores, classes, transforms)
