"""Synthetic scenes with known trajectories, and a detector-like noise model, to measure tracking.

A scene is a list of actors, each moving along keyframes (frame, centre x, centre y), linear in between
(two keyframes at one place: the actor stops). ``ground_truth`` gives every actor's box on every frame it
is in the picture, with how much of it is visible: actors lower in the image are nearer the camera and
hide the ones behind them, and the picture's edge cuts off actors leaving it. ``detect`` turns that into
what a detector would report: boxes jittered in
proportion to their size, objects missed at random, partly hidden objects detected with a low score,
mostly hidden ones missed, and false positives at random places with low to middling scores.

Used by tests/unit/sdk/test_tracking.py (MOTA, IDF1 with motmetrics, exact line counts) and
tools/bench/track_bench.py (objects per frame at a given count).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Actor",
    "Detections",
    "Noise",
    "Truth",
    "crossing_scene",
    "detect",
    "ground_truth",
    "line_scene",
    "mot_metrics",
    "random_scene",
]


@dataclass(frozen=True)
class Actor:
    id: int
    label: str
    w: float
    h: float
    keys: tuple[tuple[int, float, float], ...]  # (frame, cx, cy), frames increasing

    def at(self, frame: int) -> tuple[float, float] | None:
        ks = self.keys
        if frame < ks[0][0] or frame > ks[-1][0]:
            return None
        for (f0, x0, y0), (f1, x1, y1) in itertools.pairwise(ks):
            if f0 <= frame <= f1:
                u = 0.0 if f1 == f0 else (frame - f0) / (f1 - f0)
                return x0 + u * (x1 - x0), y0 + u * (y1 - y0)
        return ks[0][1], ks[0][2]


@dataclass
class Truth:
    """One frame: ids, labels, boxes (N, 4) clipped to the picture, visible fraction (N,)."""

    ids: np.ndarray
    labels: list[str]
    boxes: np.ndarray
    visible: np.ndarray


@dataclass
class Detections:
    boxes: np.ndarray
    scores: np.ndarray
    labels: list[str]
    source: np.ndarray  # actor id, or -1 for a false positive


@dataclass(frozen=True)
class Noise:
    jitter: float = 0.03  # box edge standard deviation, as a fraction of the box's width / height
    miss: float = 0.05  # chance that a visible object is not detected
    false_per_frame: float = 0.3  # mean false positives per frame (Poisson)
    low_score: float = 0.15  # chance that a visible object is detected with a low score (0.15-0.5)
    hidden_low: float = 0.6  # visible fraction below which an object scores low
    hidden_miss: float = 0.3  # visible fraction below which it is missed
    labels: tuple[str, ...] = ("person",)  # false positives' labels


def ground_truth(actors: list[Actor], frames: int, width: int, height: int) -> list[Truth]:
    out = []
    for f in range(frames):
        rows = []
        for a in actors:
            c = a.at(f)
            if c is None:
                continue
            x1, y1, x2, y2 = c[0] - a.w / 2, c[1] - a.h / 2, c[0] + a.w / 2, c[1] + a.h / 2
            cx1, cy1, cx2, cy2 = max(0.0, x1), max(0.0, y1), min(float(width), x2), min(float(height), y2)
            if cx2 - cx1 < 2 or cy2 - cy1 < 2:
                continue
            inframe = (cx2 - cx1) * (cy2 - cy1) / ((x2 - x1) * (y2 - y1))
            rows.append((a.id, a.label, (cx1, cy1, cx2, cy2), inframe))
        if not rows:
            out.append(Truth(np.zeros(0, np.int64), [], np.zeros((0, 4)), np.zeros(0)))
            continue
        boxes = np.array([r[2] for r in rows])
        visible = _visibility(boxes) * np.array([r[3] for r in rows])  # hidden by others, cut by the edge
        out.append(Truth(np.array([r[0] for r in rows]), [r[1] for r in rows], boxes, visible))
    return out


def _visibility(boxes: np.ndarray) -> np.ndarray:
    """Fraction of each box not covered by boxes nearer the camera (larger bottom edge), on a 9x9 grid of
    sample points per box; only boxes that overlap are compared."""
    n = len(boxes)
    vis = np.ones(n)
    ix = np.minimum(boxes[:, None, 2], boxes[None, :, 2]) > np.maximum(boxes[:, None, 0], boxes[None, :, 0])
    iy = np.minimum(boxes[:, None, 3], boxes[None, :, 3]) > np.maximum(boxes[:, None, 1], boxes[None, :, 1])
    nearer = boxes[None, :, 3] > boxes[:, None, 3]  # [i, j]: j is nearer than i
    covers = ix & iy & nearer
    u = np.linspace(0.0, 1.0, 9)
    for i in np.flatnonzero(covers.any(axis=1)):
        b = boxes[i]
        gx, gy = np.meshgrid(b[0] + u * (b[2] - b[0]), b[1] + u * (b[3] - b[1]))
        o = boxes[covers[i]]
        hit = (
            (gx[..., None] >= o[:, 0])
            & (gx[..., None] <= o[:, 2])
            & (gy[..., None] >= o[:, 1])
            & (gy[..., None] <= o[:, 3])
        )
        vis[i] = 1.0 - hit.any(axis=-1).mean()
    return vis


def detect(truth: Truth, noise: Noise, rng: np.random.Generator, width: int, height: int) -> Detections:
    boxes, scores, labels, source = [], [], [], []
    for k in range(len(truth.ids)):
        v = truth.visible[k]
        if v < noise.hidden_miss or rng.random() < noise.miss:
            continue
        b = truth.boxes[k]
        w, h = b[2] - b[0], b[3] - b[1]
        jit = rng.normal(0.0, noise.jitter, 4) * np.array([w, h, w, h])
        boxes.append(b + jit)
        low = v < noise.hidden_low or rng.random() < noise.low_score
        scores.append(rng.uniform(0.15, 0.5) if low else rng.uniform(0.55, 0.95))
        labels.append(truth.labels[k])
        source.append(int(truth.ids[k]))
    for _ in range(rng.poisson(noise.false_per_frame)):
        w, h = rng.uniform(20, 80), rng.uniform(40, 160)
        x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
        boxes.append(np.array([x, y, x + w, y + h]))
        scores.append(rng.uniform(0.1, 0.65))
        labels.append(str(rng.choice(noise.labels)))
        source.append(-1)
    if not boxes:
        return Detections(np.zeros((0, 4)), np.zeros(0), [], np.zeros(0, np.int64))
    return Detections(np.array(boxes), np.array(scores), labels, np.array(source))


def crossing_scene() -> tuple[list[Actor], int, int, int]:
    """1280x720, 300 frames: people crossing each other (one hides the other), one stopping for 40 frames,
    one leaving on the right, one entering late, two cars overtaking, two people walking side by side."""
    A = Actor
    actors = [
        A(1, "person", 40, 100, ((0, 100, 400), (200, 1100, 400))),  # left → right
        A(2, "person", 40, 100, ((0, 1100, 390), (200, 100, 390))),  # right → left, crosses 1 behind it
        A(3, "person", 36, 90, ((0, 300, 250), (60, 500, 250), (100, 500, 250), (220, 900, 250))),  # stops
        A(4, "person", 44, 110, ((20, 900, 600), (150, 1350, 600))),  # leaves on the right
        A(5, "person", 40, 100, ((100, 200, 520), (299, 700, 470))),  # enters late
        A(6, "car", 160, 80, ((0, -60, 150), (120, 1340, 150))),  # fast car
        A(7, "car", 150, 75, ((30, -60, 170), (299, 1100, 170))),  # slower car, overtaken
        A(8, "person", 38, 95, ((0, 600, 660), (299, 300, 640))),  # side by side ...
        A(9, "person", 38, 95, ((0, 660, 665), (299, 360, 645))),  # ... with 8
        A(10, "person", 40, 100, ((150, 1200, 330), (299, 800, 310))),
    ]
    return actors, 300, 1280, 720


def line_scene() -> tuple[list[Actor], int, int, int, tuple[tuple[float, float], tuple[float, float]], int, int]:
    """People crossing a vertical line at x = 640 (y 100..620): 4 left to right, 2 right to left, one
    walking to the line and back without crossing, one passing beside the line's end, one stopping next
    to it. Returns the actors, frames, width, height, the line, and the expected in / out counts (moving
    right across a line drawn top to bottom is ``out``: the right-hand side of the line's direction)."""
    A = Actor
    actors = [
        A(1, "person", 40, 100, ((0, 200, 200), (120, 1000, 220))),
        A(2, "person", 40, 100, ((10, 150, 330), (150, 1100, 320))),
        A(3, "person", 40, 100, ((40, 300, 450), (200, 1000, 470))),
        A(4, "person", 40, 100, ((60, 100, 560), (260, 1180, 540))),
        A(5, "person", 40, 100, ((0, 1100, 260), (160, 200, 280))),
        A(6, "person", 40, 100, ((80, 1150, 400), (250, 150, 380))),
        A(7, "person", 40, 100, ((0, 300, 500), (80, 600, 500), (160, 300, 500))),  # to the line and back
        A(8, "person", 40, 100, ((0, 100, 690), (200, 1200, 690))),  # below the line's end (y > 620)
        A(9, "person", 40, 100, ((20, 900, 150), (90, 680, 150), (299, 680, 150))),  # stops beside it
    ]
    return actors, 300, 1280, 720, ((640.0, 100.0), (640.0, 620.0)), 2, 4


@dataclass
class _Walker:
    x: float
    y: float
    vx: float
    vy: float
    w: float
    h: float
    label: str = "person"
    alive: bool = field(default=True)


def random_scene(n: int, frames: int, seed: int = 0, width: int = 1920, height: int = 1080) -> list[Actor]:
    """``n`` objects walking at constant speeds, bouncing off the picture's edges (for benchmarks)."""
    rng = np.random.default_rng(seed)
    actors = []
    for i in range(n):
        w, h = rng.uniform(20, 60), rng.uniform(50, 140)
        x, y = rng.uniform(w, width - w), rng.uniform(h, height - h)
        vx, vy = rng.uniform(-6, 6), rng.uniform(-3, 3)
        keys = [(0, x, y)]
        for f in range(1, frames):
            x, y = x + vx, y + vy
            if not w / 2 < x < width - w / 2:
                vx = -vx
            if not h / 2 < y < height - h / 2:
                vy = -vy
            keys.append((f, x, y))
        label = "car" if i % 5 == 4 else "person"
        actors.append(Actor(i + 1, label, w, h, tuple(keys)))
    return actors


def mot_metrics(
    truth: list[Truth], hypotheses: list[tuple[np.ndarray, np.ndarray]], min_visible: float = 0.5
) -> dict[str, float]:
    """MOTA, IDF1, ID switches... with motmetrics, matching at IoU >= 0.5. ``hypotheses``: per frame, the
    tracker's (ids, boxes). Ground truth: the objects at least ``min_visible`` visible. (The distance
    matrix is computed here: motmetrics 1.4's ``iou_matrix`` calls ``np.asfarray``, gone in NumPy 2.)"""
    import motmetrics as mm

    acc = mm.MOTAccumulator(auto_id=True)
    for gt, (hid, hb) in zip(truth, hypotheses, strict=True):
        keep = gt.visible >= min_visible
        gb, gid = gt.boxes[keep], gt.ids[keep]
        iou = _iou_matrix(gb, hb)
        acc.update(gid.tolist(), np.asarray(hid).tolist(), np.where(iou >= 0.5, 1.0 - iou, np.nan))
    names = ["mota", "motp", "idf1", "num_switches", "num_fragmentations", "mostly_tracked", "num_unique_objects"]
    summary = mm.metrics.create().compute(acc, metrics=names, name="scene")
    return {k: float(summary[k].iloc[0]) for k in names}


def _iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return np.asarray(inter / (area_a[:, None] + area_b[None, :] - inter))
