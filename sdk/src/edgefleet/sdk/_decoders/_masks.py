"""Instance masks from a YOLO segmentation head: prototypes x coefficients, as Ultralytics computes them,
then mapped back through the letterbox into compact forms (outline polygons or COCO RLE).

Ultralytics (``ultralytics.utils.ops.process_mask`` with ``upsample=True``, what ``predict`` uses without
``retina_masks``): the mask logits are ``coefficients @ prototypes`` at the prototypes' resolution,
upsampled bilinearly to the input size (``F.interpolate``, half-pixel centres), kept where above 0, and
cropped to the box: pixel column ``c`` is inside when ``x1 <= c < x2`` (rows likewise). Here the same
numbers are computed only for the pixels inside each box (the upsampling is separable, so a box costs its
own area, not the whole input's).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .._results import Mask
from .._transform import Transform

__all__ = ["box_masks", "mask_polygons", "mask_rle"]


def _axis(start: int, stop: int, scale: float, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear taps for output pixels ``start .. stop`` reading an axis of ``size`` samples, ``scale`` =
    size / output size, as ``F.interpolate(mode="bilinear", align_corners=False)`` takes them: the
    source position ``(d + 0.5) * scale - 0.5``, clamped at 0; the lower tap, the upper one (clamped at the
    end) and the upper one's weight."""
    src = (np.arange(start, stop, dtype=np.float32) + np.float32(0.5)) * np.float32(scale) - np.float32(0.5)
    src = np.maximum(src, np.float32(0))
    lo = np.minimum(src.astype(np.int64), size - 1)
    hi = np.minimum(lo + 1, size - 1)
    return lo, hi, src - lo.astype(np.float32)


def _upsample(logits: np.ndarray, c0: int, c1: int, r0: int, r1: int, input_hw: tuple[int, int]) -> np.ndarray:
    """The bilinear upsampling of ``logits`` (mh, mw) to the input size, only at input pixels
    ``r0 .. r1`` x ``c0 .. c1``. When the input is a whole multiple k of the prototypes (Ultralytics: 640
    over 160), OpenCV resizes the prototypes under the box (with one prototype pixel around it, so every
    tap is the one the whole-image upsampling takes) by k: the same half-pixel taps, in SIMD; otherwise
    the taps are gathered here."""
    import cv2

    mh, mw = logits.shape
    ih, iw = input_hw
    ky, kx = ih // mh, iw // mw
    if ky * mh == ih and kx * mw == iw and ky == kx:
        p0, p1 = max(0, c0 // kx - 1), min(mw, -(-c1 // kx) + 1)
        q0, q1 = max(0, r0 // ky - 1), min(mh, -(-r1 // ky) + 1)
        patch = np.ascontiguousarray(logits[q0:q1, p0:p1])
        up = cv2.resize(patch, ((p1 - p0) * kx, (q1 - q0) * ky), interpolation=cv2.INTER_LINEAR)
        # at the prototypes' own borders OpenCV clamps its taps as F.interpolate does; inside, the
        # prototype pixel around the box supplies the taps the whole-image upsampling reads
        out: np.ndarray = up[r0 - q0 * ky : r1 - q0 * ky, c0 - p0 * kx : c1 - p0 * kx]
        return out
    return _gathered(logits, c0, c1, r0, r1, input_hw)


def _gathered(logits: np.ndarray, c0: int, c1: int, r0: int, r1: int, input_hw: tuple[int, int]) -> np.ndarray:
    """:func:`_upsample` for any size ratio: each output pixel's taps gathered, rows then columns."""
    mh, mw = logits.shape
    ih, iw = input_hw
    ylo, yhi, wy = _axis(r0, r1, mh / ih, mh)
    xlo, xhi, wx = _axis(c0, c1, mw / iw, mw)
    rows = logits[ylo] * (1 - wy)[:, None] + logits[yhi] * wy[:, None]  # (h, mw)
    region: np.ndarray = rows[:, xlo] * (1 - wx)[None, :] + rows[:, xhi] * wx[None, :]  # (h, w)
    return region


def box_masks(
    protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray, input_hw: tuple[int, int]
) -> list[tuple[int, int, np.ndarray]]:
    """For each detection: ``(x0, y0, mask)``, its binary mask (bool, rows x columns) over the input pixels
    inside its box, whose top-left pixel is ``(x0, y0)``. ``protos`` (M, mh, mw) of one frame,
    ``coefficients`` (k, M), ``boxes`` (k, 4) x1, y1, x2, y2 in input pixels. A box with no pixel inside
    the input gets an empty mask."""
    m, mh, mw = protos.shape
    ih, iw = input_hw
    logits = (coefficients.astype(np.float32) @ protos.reshape(m, -1).astype(np.float32)).reshape(-1, mh, mw)
    out = []
    for i, (x1, y1, x2, y2) in enumerate(boxes.tolist()):
        c0, c1 = max(0, math.ceil(x1)), min(iw, math.ceil(x2))
        r0, r1 = max(0, math.ceil(y1)), min(ih, math.ceil(y2))
        if c1 <= c0 or r1 <= r0:
            out.append((c0, r0, np.zeros((0, 0), bool)))
            continue
        out.append((c0, r0, _upsample(logits[i], c0, c1, r0, r1, input_hw) > 0))
    return out


def mask_polygons(x0: int, y0: int, mask: np.ndarray, t: Transform) -> tuple[tuple[float, ...], ...]:
    """The outer outlines of ``mask`` (input pixels, top-left ``(x0, y0)``) in source pixels, clipped to
    the frame: OpenCV's external contours with their straight runs compressed, as Ultralytics'
    ``masks2segments`` finds them, mapped back through the letterbox as its ``scale_coords`` does."""
    import cv2

    if not mask.any():
        return ()
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    if not contours:
        return ()
    pts = np.concatenate([c.reshape(-1, 2) for c in contours]).astype(np.float32)
    pts[:, 0] = np.clip((pts[:, 0] + x0 - t.pad_x) / t.scale_x, 0, t.src_w)
    pts[:, 1] = np.clip((pts[:, 1] + y0 - t.pad_y) / t.scale_y, 0, t.src_h)
    flat = np.round(pts, 1).ravel().tolist()
    bounds = np.cumsum([0, *(2 * len(c) for c in contours)]).tolist()
    return tuple(tuple(flat[a:b]) for a, b in itertools.pairwise(bounds))


def mask_rle(x0: int, y0: int, mask: np.ndarray, t: Transform) -> Mask:
    """``mask`` (input pixels, top-left ``(x0, y0)``) at the source frame's resolution as COCO's
    uncompressed RLE (column-major over the whole frame, runs of 0s first): each source pixel takes the
    input pixel its centre falls in."""
    h, w = t.src_h, t.src_w
    if not mask.any():
        return Mask(counts=(h * w,), size=(h, w))
    mh, mw = mask.shape
    # source pixels whose centre maps inside the mask's region
    sx0 = max(0, math.floor((x0 - t.pad_x) / t.scale_x))
    sx1 = min(w, math.ceil((x0 + mw - t.pad_x) / t.scale_x) + 1)
    sy0 = max(0, math.floor((y0 - t.pad_y) / t.scale_y))
    sy1 = min(h, math.ceil((y0 + mh - t.pad_y) / t.scale_y) + 1)
    if sx1 <= sx0 or sy1 <= sy0:
        return Mask(counts=(h * w,), size=(h, w))
    cols = np.floor((np.arange(sx0, sx1) + 0.5) * t.scale_x + t.pad_x).astype(np.int64) - x0
    rows = np.floor((np.arange(sy0, sy1) + 0.5) * t.scale_y + t.pad_y).astype(np.int64) - y0
    # the source columns and rows whose centres fall inside the mask (both runs are contiguous)
    ci, ri = np.flatnonzero((cols >= 0) & (cols < mw)), np.flatnonzero((rows >= 0) & (rows < mh))
    if ci.size == 0 or ri.size == 0:
        return Mask(counts=(h * w,), size=(h, w))
    # column-major over the frame: the columns sx0 .. sx1, each full height, then everything else is 0
    strip = np.zeros((sx1 - sx0, h), np.uint8)
    picked = mask.T.take(cols[ci], axis=0).take(rows[ri], axis=1)  # (source columns, source rows)
    strip[ci[0] : ci[-1] + 1, sy0 + ri[0] : sy0 + ri[-1] + 1] = picked
    flat = strip.ravel()
    change = np.flatnonzero(np.diff(flat)) + 1  # where a run ends
    edges = np.concatenate(([0], change, [flat.size])) + sx0 * h
    runs = np.diff(edges)
    counts = [int(sx0 * h + runs[0])] if flat[0] == 0 else [sx0 * h, *runs[:1].tolist()]
    counts += runs[1:].tolist()
    tail = h * w - int(edges[-1])
    if tail and flat[-1] == 0:  # the last run is 0s: the tail extends it
        counts[-1] += tail
    elif tail:
        counts.append(tail)
    return Mask(counts=tuple(counts), size=(h, w))
