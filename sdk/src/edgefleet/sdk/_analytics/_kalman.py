"""A constant-velocity Kalman filter over many boxes at once (ByteTrack's motion model).

State per box: centre x, centre y, aspect ratio w/h, height, and their velocities (per frame). The noise
model is ByteTrack's (and DeepSORT's): standard deviations proportional to the box height.

Because every matrix involved is block-diagonal in the four (position, velocity) pairs — the transition
couples a coordinate only with its own velocity, the measurement picks the positions, and the process and
measurement noises are diagonal — the covariance stays block-diagonal: each box keeps four 2x2 blocks,
stored as three arrays ``pp``, ``pv``, ``vv`` of shape (N, 4). Predict and update are then a few
element-wise numpy operations over all boxes, with no per-box matrices, and equal the full 8x8 filter
exactly (``tests/unit/sdk/test_tracking.py`` checks it against the textbook form).
"""

from __future__ import annotations

import numpy as np

__all__ = ["KalmanBoxes", "xyah_to_xyxy", "xyxy_to_xyah"]

_W_POS = 1.0 / 20.0
_W_VEL = 1.0 / 160.0
# aspect-ratio terms are absolute, not relative to the height
_POS_A, _VEL_A, _MEAS_A = 1e-2, 1e-5, 1e-1


def xyxy_to_xyah(boxes: np.ndarray) -> np.ndarray:
    """(N, 4) x1, y1, x2, y2 → centre x, centre y, w/h, h (heights clipped to >= 1e-3)."""
    w = boxes[:, 2] - boxes[:, 0]
    h = np.maximum(boxes[:, 3] - boxes[:, 1], 1e-3)
    return np.stack([boxes[:, 0] + w / 2, boxes[:, 1] + h / 2, w / h, h], axis=1)


def xyah_to_xyxy(state: np.ndarray) -> np.ndarray:
    """(N, 4) centre x, centre y, w/h, h → x1, y1, x2, y2."""
    h = state[:, 3]
    w = state[:, 2] * h
    x1 = state[:, 0] - w / 2
    y1 = state[:, 1] - h / 2
    return np.stack([x1, y1, x1 + w, y1 + h], axis=1)


def _scale(h: np.ndarray, w: float, absolute: float) -> np.ndarray:
    """(N,) heights → (N, 4) standard deviations [w·h, w·h, absolute, w·h]."""
    s = np.repeat((w * h)[:, None], 4, axis=1)
    s[:, 2] = absolute
    return s


class KalmanBoxes:
    """The filter state of N boxes as arrays (float64): ``pos``/``vel`` (N, 4) and the covariance blocks
    ``pp``/``pv``/``vv`` (N, 4). Rows are boxes; callers keep them aligned with their own track arrays
    (``take`` / ``append``)."""

    def __init__(self) -> None:
        self.pos = np.zeros((0, 4))
        self.vel = np.zeros((0, 4))
        self.pp = np.zeros((0, 4))
        self.pv = np.zeros((0, 4))
        self.vv = np.zeros((0, 4))

    def __len__(self) -> int:
        return len(self.pos)

    def append(self, measurements: np.ndarray) -> None:
        """Start boxes at (M, 4) xyah measurements: zero velocity, ByteTrack's initial uncertainty."""
        h = measurements[:, 3]
        std_p = 2.0 * _scale(h, _W_POS, _POS_A / 2.0)
        std_v = 10.0 * _scale(h, _W_VEL, _VEL_A / 10.0)
        self.pos = np.concatenate([self.pos, measurements])
        self.vel = np.concatenate([self.vel, np.zeros_like(measurements)])
        self.pp = np.concatenate([self.pp, std_p**2])
        self.pv = np.concatenate([self.pv, np.zeros_like(measurements)])
        self.vv = np.concatenate([self.vv, std_v**2])

    def take(self, keep: np.ndarray) -> None:
        """Keep the rows selected by ``keep`` (a boolean mask or indices), in that order."""
        self.pos, self.vel = self.pos[keep], self.vel[keep]
        self.pp, self.pv, self.vv = self.pp[keep], self.pv[keep], self.vv[keep]

    def predict(self, rows: np.ndarray, steps: np.ndarray) -> None:
        """Advance ``rows`` (indices) by ``steps`` frames each (integers >= 1): the closed form of ``steps``
        single-frame predictions with the process noise of the box's current height."""
        k = steps.astype(np.float64)[:, None]
        h = self.pos[rows, 3]
        q_p = _scale(h, _W_POS, _POS_A) ** 2
        q_v = _scale(h, _W_VEL, _VEL_A) ** 2
        s1 = k * (k - 1.0) / 2.0  # sum of j for j < k
        s2 = (k - 1.0) * k * (2.0 * k - 1.0) / 6.0  # sum of j^2 for j < k
        pp, pv, vv = self.pp[rows], self.pv[rows], self.vv[rows]
        self.pos[rows] += k * self.vel[rows]
        self.pp[rows] = pp + 2.0 * k * pv + k * k * vv + k * q_p + s2 * q_v
        self.pv[rows] = pv + k * vv + s1 * q_v
        self.vv[rows] = vv + k * q_v

    def update(self, rows: np.ndarray, measurements: np.ndarray) -> None:
        """Correct ``rows`` (indices, each once) with (M, 4) xyah measurements."""
        h = self.pos[rows, 3]
        r = _scale(h, _W_POS, _MEAS_A) ** 2
        pp, pv, vv = self.pp[rows], self.pv[rows], self.vv[rows]
        s = pp + r
        k_p = pp / s
        k_v = pv / s
        innovation = measurements - self.pos[rows]
        self.pos[rows] += k_p * innovation
        self.vel[rows] += k_v * innovation
        self.pp[rows] = pp - k_p * pp
        self.pv[rows] = pv - k_p * pv
        self.vv[rows] = vv - k_v * pv

    def boxes(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The current estimate of ``rows`` as (N, 4) x1, y1, x2, y2."""
        return xyah_to_xyxy(self.pos[rows])
