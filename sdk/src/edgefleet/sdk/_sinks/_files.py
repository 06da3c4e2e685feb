"""Built-in sinks: JSON lines, annotated H.264 video, and a Python callback."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from .._errors import SinkError
from .._frames import Frame
from .._results import Detection, Result
from ._base import Sink
from ._overlay import Trails, draw_regions, draw_tracks

__all__ = ["VIDEO_SUFFIXES", "CallbackSink", "JsonlSink", "VideoSink", "draw_result"]

VIDEO_SUFFIXES = frozenset({".mp4", ".mkv", ".mov"})  # containers PyAV writes H.264 into

_log = logging.getLogger(__name__)


class CallbackSink(Sink):
    """Calls ``fn(result)`` for every result (the SDK's callback form)."""

    def __init__(self, fn: Callable[[Result], Any]) -> None:
        self.fn = fn

    def write(self, result: Result, frame: Frame) -> None:
        self.fn(result)


class JsonlSink(Sink):
    """One JSON object per result per line (``Result.to_dict()``), flushed every ``flush_every`` lines."""

    def __init__(self, path: str | Path, flush_every: int = 64) -> None:
        if isinstance(flush_every, bool) or not isinstance(flush_every, int) or flush_every < 1:
            raise SinkError(f"flush_every must be an integer >= 1, got {flush_every!r}")
        self.path = Path(path)
        self.flush_every = flush_every
        self._f: IO[str] | None = None
        self._n = 0

    def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise SinkError(f"{self.path}: cannot write JSONL: {exc.strerror}") from None

    def write(self, result: Result, frame: Frame) -> None:
        if self._f is None:
            raise SinkError(f"{self.path}: the JSONL sink is not open")
        try:
            self._f.write(json.dumps(result.to_dict(), separators=(",", ":")) + "\n")
            self._n += 1
            if self._n % self.flush_every == 0:
                self._f.flush()
        except OSError as exc:  # disk full, a vanished mount: name the sink, not just the errno
            raise SinkError(f"{self.path}: cannot write JSONL: {exc.strerror or exc}") from None

    def close(self) -> None:
        if self._f is not None:
            f, self._f = self._f, None
            try:
                f.close()
            except OSError as exc:
                raise SinkError(f"{self.path}: cannot finish JSONL: {exc.strerror or exc}") from None


_PALETTE = np.array(
    [
        [56, 56, 255],
        [151, 157, 255],
        [31, 112, 255],
        [29, 178, 255],
        [49, 210, 207],
        [10, 249, 72],
        [23, 204, 146],
        [134, 219, 61],
        [52, 147, 26],
        [187, 212, 0],
        [168, 153, 44],
        [255, 194, 0],
        [147, 69, 52],
        [255, 115, 100],
        [236, 24, 0],
        [255, 56, 132],
        [133, 0, 82],
        [255, 56, 203],
        [200, 149, 255],
        [199, 55, 255],
    ]
)


#: the 17 COCO keypoints' limbs (0-based), drawn when a detection has 17 keypoints
_COCO_LIMBS = tuple(
    (a - 1, b - 1)
    for a, b in (
        (16, 14), (14, 12), (17, 15), (15, 13), (12, 13), (6, 12), (7, 13), (6, 7), (6, 8), (7, 9),
        (8, 10), (9, 11), (2, 3), (1, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 7),
    )
)  # fmt: skip
_KEYPOINT_MIN_SCORE = 0.25  # as Ultralytics' Annotator.kpts draws them


def _draw_mask(image: np.ndarray, det: Detection, colour: tuple[int, ...]) -> None:
    """The mask filled at 40 % over the frame (only within its box), its outline at full colour."""
    import cv2

    mask = det.mask
    if mask is None:
        return
    h, w = image.shape[:2]
    x1, y1 = max(0, int(det.box[0])), max(0, int(det.box[1]))
    x2, y2 = min(w, int(np.ceil(det.box[2])) + 1), min(h, int(np.ceil(det.box[3])) + 1)
    if x2 <= x1 or y2 <= y1:
        return
    region = image[y1:y2, x1:x2]
    if mask.counts is not None and mask.size == (h, w):
        flat = np.repeat(np.arange(len(mask.counts)) % 2 == 1, mask.counts)
        inside = flat.reshape(w, h).T[y1:y2, x1:x2]
    else:
        inside = np.zeros(region.shape[:2], np.uint8)
        polys = [np.round(np.array(p).reshape(-1, 2) - (x1, y1)).astype(np.int32) for p in mask.polygons if p]
        cv2.fillPoly(inside, polys, 1)
        cv2.polylines(region, polys, True, colour, 1, cv2.LINE_AA)
        inside = inside.astype(bool)
    if inside.any():
        tint = np.asarray(colour, np.float32)
        region[inside] = (region[inside] * 0.6 + tint * 0.4).astype(np.uint8)


def _draw_keypoints(image: np.ndarray, det: Detection, colour: tuple[int, ...]) -> None:
    """Keypoints scored at least 0.25 as dots; with COCO's 17, the skeleton between them."""
    import cv2

    kp = det.keypoints
    pts = [(round(k.x), round(k.y)) if k.score >= _KEYPOINT_MIN_SCORE else None for k in kp]
    if len(kp) == len(_COCO_LIMBS) - 2:  # 17 keypoints
        for a, b in _COCO_LIMBS:
            pa, pb = pts[a], pts[b]
            if pa is not None and pb is not None:
                cv2.line(image, pa, pb, colour, 2, cv2.LINE_AA)
    for p in pts:
        if p is not None:
            cv2.circle(image, p, 3, (255, 255, 255), -1, cv2.LINE_AA)
            cv2.circle(image, p, 3, colour, 1, cv2.LINE_AA)


def draw_result(image: np.ndarray, result: Result, trails: Trails | None = None) -> None:
    """Draw boxes, labels, masks, keypoints and the model version onto a BGR image, in place; with
    analytics, zones and lines with their counts, and tracked objects as ``label #id`` in their track's
    colour with a trail (kept in ``trails`` from frame to frame)."""
    import cv2

    draw_regions(cv2, image, result)
    tracked = draw_tracks(cv2, image, result, trails)
    tracking = any(d.track_state for d in result.detections)
    for i, det in enumerate(result.detections):
        colour = tuple(int(c) for c in _PALETTE[det.class_id % len(_PALETTE)])
        _draw_mask(image, det, colour)
        if det.keypoints:
            _draw_keypoints(image, det, colour)
        if i in tracked:
            continue
        x1, y1, x2, y2 = (round(v) for v in det.box)
        if tracking:  # beside tracked objects, an untracked detection is a thin box without a label
            cv2.rectangle(image, (x1, y1), (x2, y2), colour, 1)
            continue
        cv2.rectangle(image, (x1, y1), (x2, y2), colour, 2)
        text = f"{det.label} {det.score:.2f}"
        (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
        ty = max(y1, th + 4)
        cv2.rectangle(image, (x1, ty - th - 4), (x1 + tw + 4, ty), colour, -1)
        cv2.putText(image, text, (x1 + 2, ty - 3), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
    for i, cls in enumerate(result.classifications[:5]):
        cv2.putText(
            image,
            f"{cls.label} {cls.score:.2f}",
            (10, 50 + 22 * i),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.6,
            (0, 255, 255),
            2,
            cv2.LINE_AA,
        )
    banner = f"{result.stream_id} #{result.sequence} {result.model}:{result.model_version}"
    cv2.putText(image, banner, (10, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 0, 0), 3, cv2.LINE_AA)
    cv2.putText(image, banner, (10, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 1, cv2.LINE_AA)


class _Encoder:
    """One H.264 stream in an MP4 file (PyAV's libx264)."""

    def __init__(self, path: Path, width: int, height: int, fps: float) -> None:
        import av

        self.path = path
        try:
            self.container = av.open(str(path), mode="w")
        except Exception as exc:
            raise SinkError(f"{path}: cannot create video: {exc}") from None
        self.stream = self.container.add_stream("libx264", rate=max(1, round(fps)))
        self.stream.width = width - width % 2
        self.stream.height = height - height % 2
        self.stream.pix_fmt = "yuv420p"
        self.stream.options = {"preset": "veryfast", "crf": "23"}
        self._av = av

    def encode(self, image: np.ndarray) -> None:
        h, w = self.stream.height, self.stream.width
        frame = self._av.VideoFrame.from_ndarray(image[:h, :w], format="bgr24")
        try:
            for packet in self.stream.encode(frame):
                self.container.mux(packet)
        except OSError as exc:  # PyAV's errors are OSErrors: disk full, permissions
            raise SinkError(f"{self.path}: cannot write video: {exc.strerror or exc}") from None

    def close(self) -> None:
        for packet in self.stream.encode():
            self.container.mux(packet)
        self.container.close()


class VideoSink(Sink):
    """Annotated H.264 MP4. With several streams, one file per stream: ``out.mp4`` → ``out-<stream>.mp4``.

    Draws into the frame's slot in place (the frame is done with by then), so no pixel copy is made. A
    stream removed from the running pipeline has its file finished then; one added to a pipeline that
    started with a single stream gets its own ``out-<stream>.mp4`` (the first keeps ``out.mp4``), and a
    stream added again after its removal a new ``out-<stream>-2.mp4``: no file is written twice.
    """

    needs_pixels = True

    def __init__(self, path: str | Path, fps: float | None = None, multi_stream: bool = False) -> None:
        self.path = Path(path)
        self.fps = fps
        self.multi_stream = multi_stream
        self._encoders: dict[str, _Encoder] = {}
        self._trails = Trails()
        self.paths: dict[str, Path] = {}
        self._used: set[Path] = set()  # every file opened in this run: none is opened twice

    def open(self) -> None:
        """Check now what would otherwise fail only when the encoder first writes, or at close: after the
        whole run (libx264 holds its first frames back)."""
        try:
            import av  # noqa: F401
        except ImportError as exc:
            raise SinkError("the video sink needs PyAV: pip install 'edgefleet-sdk[video]'") from exc
        if self.path.is_dir():
            raise SinkError(f"{self.path}: is a folder; give a file name such as {self.path / 'out.mp4'}")
        if self.path.suffix.lower() not in VIDEO_SUFFIXES:
            raise SinkError(f"{self.path}: an annotated video is written as {', '.join(sorted(VIDEO_SUFFIXES))}")
        if not self.path.parent.is_dir():
            raise SinkError(f"{self.path}: folder {self.path.parent} does not exist")
        try:  # the folder must take a new file (permissions, read-only mounts)
            with tempfile.NamedTemporaryFile(dir=self.path.parent, prefix=".edgefleet-", suffix=".probe"):
                pass
        except OSError as exc:
            raise SinkError(f"{self.path}: cannot write in {self.path.parent}: {exc.strerror}") from None

    def path_for(self, stream_id: str) -> Path:
        """The file this sink writes ``stream_id``'s video to (its next one, when it has written one)."""
        if stream_id in self._encoders:
            return self._encoders[stream_id].path
        if not self.multi_stream and self.path not in self._used:
            return self.path  # the first stream of a single-stream sink
        stem, suffix = self.path.stem, self.path.suffix or ".mp4"
        path, n = self.path.with_name(f"{stem}-{stream_id}{suffix}"), 1
        while path in self._used:  # the stream was removed and added again: its first file stays
            n += 1
            path = self.path.with_name(f"{stem}-{stream_id}-{n}{suffix}")
        return path

    def write(self, result: Result, frame: Frame) -> None:
        enc = self._encoders.get(result.stream_id)
        if enc is None:
            path = self.path_for(result.stream_id)
            fps = self.fps or (self.stream_fps(result.stream_id) if self.stream_fps else None) or 25.0
            enc = self._encoders[result.stream_id] = _Encoder(path, frame.width, frame.height, fps)
            self._used.add(path)
            self.paths[result.stream_id] = path
        draw_result(frame.image, result, self._trails)
        enc.encode(frame.image)

    def on_stream_removed(self, stream_id: str) -> None:
        """Finish the stream's file now (its last result was written); raises SinkError naming the file
        when it cannot be finished."""
        self._trails.forget(stream_id)
        enc = self._encoders.pop(stream_id, None)
        if enc is None:
            return
        try:
            enc.close()
        except Exception as exc:
            raise SinkError(f"annotated video {enc.path} not written: {exc}") from None

    def close(self) -> None:
        """Finish every file; raises SinkError naming each one that could not be written (after trying all)."""
        failed = []
        for enc in self._encoders.values():
            try:
                enc.close()
            except Exception as exc:
                _log.debug("closing %s", enc.path, exc_info=True)
                failed.append(f"{enc.path}: {exc}")
        self._encoders.clear()
        if failed:
            raise SinkError("annotated video not written: " + "; ".join(failed))
