"""Frame pool, queues, the batcher, source URIs and credential redaction."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edgefleet.sdk import SourceError, parse_source, redact_uri
from edgefleet.sdk._batcher import Batcher
from edgefleet.sdk._frames import Frame, FramePool, FrameQueue, OverflowPolicy
from edgefleet.sdk._metrics import CopyCounter, StreamMetrics, StreamStats
from edgefleet.sdk._redact import redact
from edgefleet.sdk._sources import Source, SourceSpec, create_source
from edgefleet.sdk._sources._base import SourceDisconnected, SourceUnavailable
from edgefleet.sdk._sources._runner import Backoff, SourceRunner


def _frame(pool: FramePool, stream: str = "s0", seq: int = 0) -> Frame:
    slot = pool.try_acquire()
    assert slot is not None
    return Frame(stream, seq, 0.0, 0.0, slot.array, slot)


def test_pool_is_fixed_and_reuses_slots() -> None:
    pool = FramePool((4, 4, 3), 2)
    a, b = pool.try_acquire(), pool.try_acquire()
    assert a is not None and b is not None and pool.try_acquire() is None
    assert pool.acquire(0.01) is None
    arr = a.array
    a.release()
    a.release()  # twice is harmless
    c = pool.try_acquire()
    assert c is not None and c.array is arr and pool.leases == 2


def test_drop_oldest_queue_counts_drops() -> None:
    cond = threading.Condition()
    pool = FramePool((2, 2, 3), 8)
    q = FrameQueue(2, OverflowPolicy.DROP_OLDEST, cond)
    stop = threading.Event()
    for i in range(5):
        assert q.put(_frame(pool, seq=i), stop)
    assert q.dropped == 3 and len(q) == 2
    with cond:
        assert [q.pop().sequence, q.pop().sequence] == [3, 4]  # type: ignore[union-attr]
    assert pool.leases == 2  # dropped frames returned their slots


def test_block_queue_waits_and_never_drops() -> None:
    cond = threading.Condition()
    pool = FramePool((2, 2, 3), 4)
    q = FrameQueue(1, OverflowPolicy.BLOCK, cond)
    stop = threading.Event()
    q.put(_frame(pool, seq=0), stop)
    done = threading.Event()

    def producer() -> None:
        q.put(_frame(pool, seq=1), stop)
        done.set()

    t = threading.Thread(target=producer)
    t.start()
    assert not done.wait(0.2)
    with cond:
        q.pop()
    assert done.wait(2)
    t.join()
    assert q.dropped == 0


def test_a_take_wakes_only_that_streams_blocked_source() -> None:
    """Two streams' sources blocked on full queues (waiting up to 5 s a round): taking a frame from one
    queue lets its source in at once, and the other source is not woken by it (it wakes only when its own
    queue has room)."""
    cond = threading.Condition()
    pool = FramePool((2, 2, 3), 8)
    qs = [FrameQueue(1, OverflowPolicy.BLOCK, cond) for _ in range(2)]
    stop = threading.Event()
    for q in qs:
        q.put(_frame(pool, seq=0), stop)
    entered = [threading.Event(), threading.Event()]
    wakeups = [0, 0]

    class Counting(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            r = super().wait(timeout)
            wakeups[self.index] += 1
            return r

    for i, q in enumerate(qs):
        counting = Counting(cond)  # type: ignore[arg-type]
        counting.index = i  # type: ignore[attr-defined]
        q._not_full = counting  # type: ignore[attr-defined]

    def producer(i: int) -> None:
        qs[i].put(_frame(pool, seq=1), stop, timeout=5.0)
        entered[i].set()

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    with cond:
        qs[0].pop()
    assert entered[0].wait(2) and time.monotonic() - t0 < 1.0
    assert not entered[1].wait(0.3) and wakeups[1] == 0
    with cond:
        qs[1].pop()
    assert entered[1].wait(2)
    for t in threads:
        t.join()


def test_batcher_round_robins_streams_and_ends() -> None:
    cond = threading.Condition()
    pool = FramePool((2, 2, 3), 16)
    qs = [FrameQueue(8, OverflowPolicy.BLOCK, cond) for _ in range(2)]
    stop = threading.Event()
    for i in range(3):
        qs[0].put(_frame(pool, "a", i), stop)
    qs[1].put(_frame(pool, "b", 0), stop)
    b = Batcher(qs, cond, timeout_s=0.01)
    batch = b.next_batch(2, stop)
    assert batch is not None and sorted(f.stream_id for f in batch) == ["a", "b"]
    for q in qs:
        q.finish()
    rest = b.next_batch(8, stop)
    assert rest is not None and [f.sequence for f in rest] == [1, 2]
    assert b.next_batch(8, stop) is None


def test_backoff_is_jittered_and_capped() -> None:
    import random

    b = Backoff(base=0.5, cap=4.0, rng=random.Random(1))
    delays = [b.next_delay() for _ in range(8)]
    assert all(0.25 <= d <= 4.0 for d in delays)
    assert delays[-1] >= 2.0 and len(set(delays)) == len(delays)
    b.reset()
    assert b.next_delay() <= 0.5


class _FlakyCamera(Source):
    """A live camera that breaks after 3 frames, refuses the first reopen, then streams again."""

    def __init__(self) -> None:
        super().__init__(SourceSpec("fake://cam", "network", "cam", live=True))
        self.opens = 0
        self.frames = 0
        self.metrics: StreamMetrics | None = None
        self.during_outage: StreamStats | None = None

    def open(self) -> None:
        self.opens += 1
        if self.opens == 2:
            raise SourceUnavailable("fake://cam: connection refused by cam:554")
        if self.opens == 3 and self.metrics is not None:
            self.during_outage = self.metrics.snapshot()  # still down: the error is the current one

    def frame_shape(self) -> tuple[int, int] | None:
        return (8, 8)

    def read(self, out: np.ndarray | None) -> np.ndarray | None:
        self.frames += 1
        if self.frames == 4:
            raise SourceDisconnected("stream ended or stalled")
        time.sleep(0.001)
        image = out if out is not None else np.empty((8, 8, 3), np.uint8)
        image[:] = self.frames % 256
        return image

    def close(self) -> None:
        pass


def test_last_error_clears_when_the_stream_is_back_and_recent_error_keeps_it() -> None:
    """A camera that dropped and came back used to show its outage as ``last_error`` for ever."""
    cam = _FlakyCamera()
    metrics = StreamMetrics("cam", live=True)
    cam.metrics = metrics
    stop = threading.Event()
    errors: list[BaseException] = []
    queue = FrameQueue(2, OverflowPolicy.DROP_OLDEST, threading.Condition())
    runner = SourceRunner(
        cam, queue, metrics, CopyCounter(), stop, errors.append, pool_size=4, backoff=Backoff(0.001, 0.001)
    )
    before = time.time()
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while (metrics.reconnects < 1 or cam.frames < 10) and time.monotonic() < deadline:
            time.sleep(0.01)
        back = metrics.snapshot()
    finally:
        stop.set()
        runner.join(5)
    assert not errors
    assert cam.during_outage is not None
    assert cam.during_outage.last_error == "fake://cam: connection refused by cam:554"
    assert (back.outages, back.reconnects, back.connected) == (1, 1, True)
    assert back.last_error is None  # healthy again
    assert back.recent_error == "fake://cam: connection refused by cam:554"  # what went wrong last
    assert back.recent_error_at is not None and before <= back.recent_error_at <= time.time()


def test_parse_source_forms(tmp_path: Path, clip: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"")
    assert parse_source(str(clip)).kind == "file"
    assert not parse_source(str(clip)).live
    assert parse_source(f"{clip}?realtime=1&loop=1").realtime
    assert parse_source(str(tmp_path)).kind == "images"
    s = parse_source("cam1=rtsp://u:p@127.0.0.1:8554/x#transport=udp", 3)
    assert (s.kind, s.stream_id, s.live, getattr(s.config, "transport", None)) == ("network", "cam1", True, "udp")
    assert s.uri == "rtsp://u:p@127.0.0.1:8554/x"
    assert parse_source("/dev/video0").kind == "usb"
    assert parse_source("videotestsrc ! videoconvert").kind == "gstreamer"
    assert parse_source("gst:videotestsrc pattern=ball").uri == "videotestsrc pattern=ball"
    syn = parse_source("synthetic:?width=320&height=240&fps=15", 2)
    assert (syn.kind, syn.stream_id, syn.live, getattr(syn.config, "width", None)) == ("synthetic", "s2", True, 320)


@pytest.mark.parametrize("bad", ["", "no/such/file.mp4", "clip.mp4?queue=0", "synthetic:?live=maybe"])
def test_parse_source_errors(bad: str) -> None:
    with pytest.raises(SourceError):
        parse_source(bad)


def test_unknown_or_malformed_options_are_named(clip: Path) -> None:
    """A misspelt option is an error naming it and the known ones, not a silently different run."""
    with pytest.raises(SourceError, match=r"unknown option realtim for a file source \(known: live, loop, queue"):
        parse_source(f"{clip}?realtim=1")
    with pytest.raises(SourceError, match="unknown option width for a nvdec source"):
        parse_source(f"nvdec:{clip}?width=640")
    with pytest.raises(SourceError, match="option fps must be a number, got 'fast'"):
        parse_source("synthetic:?fps=fast")
    with pytest.raises(SourceError, match="option fps: Input should be a finite number"):
        create_source(parse_source("synthetic:?fps=nan"))
    with pytest.raises(SourceError, match="transport must be one of tcp, udp"):
        parse_source("rtsp://127.0.0.1:8554/x#transport=carrierpigeon")
    with pytest.raises(SourceError, match="no host in this URL"):
        parse_source("rtsp://")
    with pytest.raises(SourceError, match="option timeout_ms must be an integer") as exc:
        parse_source("rtsp://admin:s3cret@127.0.0.1:1/x#timeout_ms=2s")
    assert "s3cret" not in str(exc.value)
    nv = parse_source(f"nvdec:{clip}?gpu=0&matrix=bt709&prefetch=4&loop=1")
    assert nv.loop and nv.config is not None
    assert nv.config.model_dump(include={"gpu", "matrix", "prefetch"}) == {"gpu": 0, "matrix": "bt709", "prefetch": 4}


def test_missing_source_error_never_shows_password() -> None:
    with pytest.raises(SourceError) as exc:
        parse_source("rtsp://admin:s3cret@127.0.0.1:1/x?queue=abc#queue=abc")
    assert "s3cret" not in str(exc.value)


def test_redaction() -> None:
    assert redact_uri("rtsp://admin:s3cret@cam/live?token=abc&ch=1") == "rtsp://admin:***@cam/live?token=***&ch=1"
    assert redact_uri("rtsp://cam/live") == "rtsp://cam/live"
    assert "s3cret" not in redact("could not open rtsp://admin:s3cret@10.0.0.1/x: refused")


def test_synthetic_source_draws_into_the_slot() -> None:
    src = create_source(parse_source("synthetic:?width=64&height=32&frames=2"))
    src.open()
    out = np.zeros((32, 64, 3), np.uint8)
    img = src.read(out)
    assert img is out and img.any()
    assert src.read(out) is out and src.read(out) is None


def test_image_folder_source(tmp_path: Path) -> None:
    import cv2

    for i in range(3):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.full((10 + i, 20, 3), i * 50, np.uint8))
    (tmp_path / "notes.txt").write_text("ignored")
    src = create_source(parse_source(str(tmp_path)))
    src.open()
    shapes = []
    while (img := src.read(None)) is not None:
        shapes.append(img.shape)
    assert shapes == [(10, 20, 3), (11, 20, 3), (12, 20, 3)]


def test_unreadable_video_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00" * 1000)
    src = create_source(parse_source(str(bad)))
    with pytest.raises(SourceError, match="not a readable video file"):
        src.open()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="V4L2 device nodes")
def test_a_camera_index_with_no_device_node_fails_at_once() -> None:
    """`usb:0` with no camera retried forever while `/dev/video0` failed at once; both fail at once now."""
    for uri in ("usb:97", "/dev/video97"):
        with pytest.raises(SourceError, match=r"no such camera device"):
            create_source(parse_source(uri)).open()


# A camera that is down, read by the real OpenCV source through its runner in a fresh process (FFmpeg's
# log level is process-wide): a closed loopback port, retried every 20 ms for half a second.
_DOWN_CAMERA = """
import logging, os, socket, sys, threading, time
logging.basicConfig(level=logging.DEBUG, format="LOG %(levelname)s %(message)s", stream=sys.stderr)
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
from edgefleet.sdk import parse_source
from edgefleet.sdk._frames import FrameQueue, OverflowPolicy
from edgefleet.sdk._metrics import CopyCounter, StreamMetrics
from edgefleet.sdk._sources import create_source
from edgefleet.sdk._sources._runner import Backoff, SourceRunner
metrics, stop = StreamMetrics("cam", True), threading.Event()
queue = FrameQueue(2, OverflowPolicy.DROP_OLDEST, threading.Condition())
source = create_source(parse_source(f"cam=rtsp://viewer:pw@127.0.0.1:{port}/x"))
runner = SourceRunner(source, queue, metrics, CopyCounter(), stop, print, pool_size=4, backoff=Backoff(0.02, 0.02))
runner.start()
time.sleep(0.5)
stop.set()
runner.join(5)
print("LEVEL", os.environ.get("OPENCV_FFMPEG_LOGLEVEL"))
print("ERROR", metrics.last_error)
"""


def _down_camera(**env: str) -> tuple[str, str]:
    import os
    import subprocess

    environ = {k: v for k, v in os.environ.items() if k != "OPENCV_FFMPEG_LOGLEVEL"}
    run = [sys.executable, "-c", _DOWN_CAMERA]
    done = subprocess.run(run, env={**environ, **env}, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_a_camera_that_is_down_is_one_warning_with_the_reason_not_ffmpeg_lines() -> None:
    """FFmpeg printed ``[tcp @ 0x...] Connection to tcp://... failed: Connection refused`` on stderr at
    every retry; the user gets one line from our logger, with that reason in it."""
    out, err = _down_camera()
    assert "[tcp @" not in err + out and "Connection to tcp://" not in err + out
    warnings = [line for line in err.splitlines() if line.startswith("LOG WARNING")]
    retries = [line for line in err.splitlines() if line.startswith("LOG DEBUG") and "retrying" in line]
    assert len(warnings) == 1 and len(retries) >= 3, err
    assert "stream cannot be opened: connection refused (nothing listens on 127.0.0.1 port " in warnings[0]
    assert "viewer:***@" in warnings[0] and ":pw@" not in err
    assert "ERROR rtsp://viewer:***@127.0.0.1:" in out and "connection refused" in out


def test_an_ffmpeg_log_level_the_user_set_is_kept() -> None:
    out, err = _down_camera(OPENCV_FFMPEG_LOGLEVEL="16")  # AV_LOG_ERROR: FFmpeg's errors wanted
    assert "LEVEL 16" in out
    assert "Connection to tcp://127.0.0.1:" in out + err  # through OpenCV's FFmpeg log callback
