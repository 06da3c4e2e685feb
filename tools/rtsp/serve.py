#!/usr/bin/python3
"""Loopback RTSP test server (GStreamer RTSP server via PyGObject).

Run with the *system* interpreter, which has Debian's python3-gi and the
GstRtspServer typelib (see tools/ci/install-system-deps.sh):

    /usr/bin/python3 tools/rtsp/serve.py --file clip.mp4 --port 8554
    /usr/bin/python3 tools/rtsp/serve.py --pattern --width 640 --height 360 --fps 15

Sources
  --file F     An H.264 .mp4/.mov. Its access units are read once into
               memory (no re-encode) and then replayed in an endless loop,
               re-timestamped so the stream behaves like a live camera at the
               file's frame rate. Every client of a non-shared mount starts at
               the first (key) frame; SPS/PPS are repeated at each IDR.
  --pattern    videotestsrc -> x264enc tune=zerolatency (live), used when no
               file is given. Optional value: videotestsrc pattern name
               (default "ball").

Once listening it prints exactly one line on stdout (flushed):

    READY rtsp://127.0.0.1:<port><path>

Errors go to stderr, exit status 2. SIGTERM/SIGINT stop it cleanly (exit 0);
all client connections are dropped when the process exits. Binds 127.0.0.1
only. ``--port 0`` picks a free port (the READY line shows which).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

HOST = "127.0.0.1"
ROLE = "user"


def log(msg: str) -> None:
    print(f"serve.py: {msg}", file=sys.stderr, flush=True)


def die(msg: str) -> None:
    log(f"error: {msg}")
    sys.exit(2)


# --------------------------------------------------------------------------
# File source: read H.264 access units once, replay them forever.
# --------------------------------------------------------------------------


class H264Clip:
    """All H.264 access units of a file, in decode order, plus their caps."""

    def __init__(self, path: str, fps_override: float | None = None) -> None:
        self.path = path
        pipeline = Gst.parse_launch(
            "filesrc name=src ! qtdemux ! h264parse ! "
            "video/x-h264,stream-format=avc,alignment=au ! "
            "appsink name=sink sync=false max-buffers=0"
        )
        pipeline.get_by_name("src").set_property("location", path)
        sink = pipeline.get_by_name("sink")
        if pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
            die(f"cannot read {path}")

        self.buffers: list[Gst.Buffer] = []
        self.caps: Gst.Caps | None = None
        bus = pipeline.get_bus()
        err = None
        while True:
            sample = sink.emit("try-pull-sample", Gst.SECOND // 5)
            if sample is not None:
                if self.caps is None:
                    self.caps = sample.get_caps()
                self.buffers.append(sample.get_buffer())
                continue
            err = bus.pop_filtered(Gst.MessageType.ERROR)
            if err is not None or sink.get_property("eos"):
                break
        pipeline.set_state(Gst.State.NULL)
        if err is not None:
            gerr, dbg = err.parse_error()
            die(f"reading {path}: {gerr.message} (expected an H.264 video in .mp4/.mov)")
        if not self.buffers or self.caps is None:
            die(f"no H.264 video frames found in {path}")

        s = self.caps.get_structure(0)
        fps = fps_override
        if fps is None:
            ok, num, den = s.get_fraction("framerate")
            fps = num / den if ok and num > 0 and den > 0 else None
        if fps is None:
            # Fall back to the timestamps themselves.
            pts = sorted(b.pts for b in self.buffers if b.pts != Gst.CLOCK_TIME_NONE)
            if len(pts) >= 2 and pts[-1] > pts[0]:
                fps = (len(pts) - 1) * Gst.SECOND / (pts[-1] - pts[0])
            else:
                fps = 25.0
        self.fps = fps
        self.frame_ns = int(round(Gst.SECOND / fps))
        self.period_ns = self.frame_ns * len(self.buffers)

        # Original timestamps relative to the earliest one; decode order is
        # kept, so B-frames (pts != dts) stay valid across loops.
        stamps = [b.dts for b in self.buffers if b.dts != Gst.CLOCK_TIME_NONE]
        stamps += [b.pts for b in self.buffers if b.pts != Gst.CLOCK_TIME_NONE]
        base = min(stamps) if stamps else 0
        self.offsets: list[tuple[int | None, int | None]] = []
        for i, b in enumerate(self.buffers):
            pts = b.pts - base if b.pts != Gst.CLOCK_TIME_NONE else i * self.frame_ns
            dts = b.dts - base if b.dts != Gst.CLOCK_TIME_NONE else None
            self.offsets.append((pts, dts))

        if not self._first_is_keyframe():
            log("warning: first frame is not a keyframe; clients may see garbage until the next IDR")

        w = s.get_value("width") if s.has_field("width") else "?"
        h = s.get_value("height") if s.has_field("height") else "?"
        log(f"loaded {len(self.buffers)} frames {w}x{h} @ {fps:.3f} fps from {path}")

    def _first_is_keyframe(self) -> bool:
        return not self.buffers[0].has_flags(Gst.BufferFlags.DELTA_UNIT)


class ClipFeeder:
    """Feeds one media's appsrc from an H264Clip, looping with fresh timestamps."""

    def __init__(self, clip: H264Clip, appsrc: Gst.Element) -> None:
        self.clip = clip
        self.appsrc = appsrc
        self.index = 0  # total frames pushed
        self.base_ns: int | None = None
        self.lock = threading.Lock()
        appsrc.set_property("caps", clip.caps)
        appsrc.set_property("format", Gst.Format.TIME)
        appsrc.set_property("is-live", True)
        appsrc.set_property("do-timestamp", False)
        appsrc.set_property("min-latency", 0)
        # Keep only ~0.5 s queued: the sink's clock sync paces the stream.
        appsrc.set_property("max-bytes", 0)
        appsrc.set_property("max-buffers", max(2, int(clip.fps / 2)))
        appsrc.set_property("block", False)
        appsrc.connect("need-data", self._on_need_data)

    def _running_time(self) -> int:
        clock = self.appsrc.get_clock()
        if clock is None:
            return 0
        return max(0, clock.get_time() - self.appsrc.get_base_time())

    def _on_need_data(self, src: Gst.Element, _length: int) -> None:
        with self.lock:
            if self.base_ns is None:
                self.base_ns = self._running_time()
            clip = self.clip
            n = len(clip.buffers)
            # Push a handful at once to keep the GIL round-trips low.
            for _ in range(4):
                loop, i = divmod(self.index, n)
                offset = self.base_ns + loop * clip.period_ns
                pts, dts = clip.offsets[i]
                buf = clip.buffers[i].copy()
                buf.pts = offset + pts
                buf.dts = offset + dts if dts is not None else Gst.CLOCK_TIME_NONE
                buf.duration = clip.frame_ns
                buf.offset = Gst.BUFFER_OFFSET_NONE
                if i == 0 and loop > 0:
                    buf.set_flags(Gst.BufferFlags.DISCONT)
                self.index += 1
                ret = src.emit("push-buffer", buf)
                if ret != Gst.FlowReturn.OK:
                    return


class ClipFactory(GstRtspServer.RTSPMediaFactory):
    def __init__(self, clip: H264Clip) -> None:
        super().__init__()
        self.clip = clip
        self.feeders: dict[int, ClipFeeder] = {}
        self.set_launch("( appsrc name=src ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=-1 )")
        self.connect("media-configure", self._on_media_configure)

    def _on_media_configure(self, _factory, media: GstRtspServer.RTSPMedia) -> None:
        appsrc = media.get_element().get_by_name_recurse_up("src")
        feeder = ClipFeeder(self.clip, appsrc)
        key = id(media)
        self.feeders[key] = feeder
        media.connect("unprepared", lambda *_: self.feeders.pop(key, None))


# --------------------------------------------------------------------------


def pattern_launch(pattern: str, width: int, height: int, fps: int) -> str:
    return (
        f"( videotestsrc is-live=true pattern={pattern} ! "
        f"video/x-raw,width={width},height={height},framerate={fps}/1 ! "
        "videoconvert ! video/x-raw,format=I420 ! "
        f"x264enc tune=zerolatency speed-preset=ultrafast key-int-max={fps} "
        "bitrate=2000 ! video/x-h264,profile=constrained-baseline ! h264parse ! "
        "rtph264pay name=pay0 pt=96 config-interval=-1 )"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8554, help="TCP port (0 = any free)")
    p.add_argument("--path", default="/stream", help="mount point (default /stream)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--file", help="H.264 .mp4 to serve in a loop")
    src.add_argument(
        "--pattern",
        nargs="?",
        const="ball",
        default=None,
        metavar="NAME",
        help="serve videotestsrc (default pattern: ball)",
    )
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=360)
    p.add_argument(
        "--fps",
        type=float,
        default=None,
        help="pattern frame rate (default 15); for --file, overrides the file's frame rate",
    )
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--shared", action="store_true", help="one media for all clients (late joiners start mid-stream)")
    a = p.parse_args(argv)
    if not a.path.startswith("/"):
        a.path = "/" + a.path
    if (a.user is None) != (a.password is None):
        p.error("--user and --password go together")
    if a.file is None and a.pattern is None:
        a.pattern = "ball"
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    Gst.init(None)

    if args.file:
        factory: GstRtspServer.RTSPMediaFactory = ClipFactory(H264Clip(args.file, args.fps))
    else:
        factory = GstRtspServer.RTSPMediaFactory()
        fps = int(round(args.fps or 15))
        factory.set_launch(pattern_launch(args.pattern, args.width, args.height, fps))
    factory.set_shared(args.shared)
    # Let the shared media be rebuilt once the last client has gone.
    factory.set_suspend_mode(GstRtspServer.RTSPSuspendMode.NONE)

    server = GstRtspServer.RTSPServer()
    server.set_address(HOST)
    server.set_service(str(args.port))

    if args.user is not None:
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, ROLE)
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(args.user, args.password), token)
        server.set_auth(auth)
        factory.add_role_from_structure(
            Gst.Structure.new_from_string(
                f"{ROLE}, media.factory.access=(boolean)true, media.factory.construct=(boolean)true"
            )
        )

    server.get_mount_points().add_factory(args.path, factory)

    # Create the listening socket now so a busy port fails loudly.
    try:
        source = server.create_source(None)
    except GLib.Error as e:
        die(f"cannot listen on {HOST}:{args.port}: {e.message}")
    source.attach(None)
    port = server.get_bound_port()

    loop = GLib.MainLoop()

    def stop(*_):
        log("stopping")
        loop.quit()
        return GLib.SOURCE_REMOVE

    GLib.unix_signal_add(GLib.PRIORITY_HIGH, signal.SIGTERM, stop)
    GLib.unix_signal_add(GLib.PRIORITY_HIGH, signal.SIGINT, stop)

    print(f"READY rtsp://{HOST}:{port}{args.path}", flush=True)
    try:
        loop.run()
    finally:
        source.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
