"""GStreamer pipeline strings through PyGObject (Jetson CSI cameras, NVMM decoders, anything gst-launch runs).

The pipeline must end in (or is given) an ``appsink`` delivering ``video/x-raw,format=BGR``. On a Jetson a
CSI camera is, for example::

    nvarguscamerasrc sensor-id=0 ! video/x-raw(memory:NVMM),width=1920,height=1080,framerate=30/1 !
    nvvidconv ! video/x-raw,format=BGRx ! videoconvert ! video/x-raw,format=BGR

Written to the GStreamer and Jetson Linux documentation; the NVMM elements are untested on hardware.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._errors import SourceError
from .._health import HealthReason
from ._base import Source, SourceDisconnected, SourceSpec, SourceUnavailable
from ._configs import GStreamerConfig

__all__ = ["GStreamerSource", "gstreamer_available"]

_SINK = "edgefleet_sink"
_init_lock = threading.Lock()


def _gst() -> Any:
    try:
        import gi

        gi.require_version("Gst", "1.0")
        from gi.repository import Gst
    except (ImportError, ValueError) as exc:
        raise SourceError(
            "GStreamer pipelines need PyGObject with GStreamer 1.0 "
            "(Debian/Ubuntu/JetPack: apt install python3-gi gir1.2-gstreamer-1.0, in the same Python)"
        ) from exc
    with _init_lock:
        if not Gst.is_initialized():
            Gst.init(None)
    return Gst


def gstreamer_available() -> bool:
    try:
        _gst()
    except SourceError:
        return False
    return True


def pipeline_description(text: str) -> str:
    """Append a BGR appsink unless the description already names ours."""
    text = text.strip()
    if f"name={_SINK}" in text:
        return text
    return (
        f"{text} ! videoconvert ! video/x-raw,format=BGR ! "
        f"appsink name={_SINK} max-buffers=2 drop=false sync=false emit-signals=false"
    )


class GStreamerSource(Source):
    """A GStreamer pipeline: live (drops the oldest under pressure, reconnects after a stall or error);
    end-of-stream ends the stream (``num-buffers``, a file). No sample within 5 s is a stall."""

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self._pipeline: Any = None
        self._sink: Any = None
        self._pending: np.ndarray | None = None
        timeout_ms = spec.config.timeout_ms if isinstance(spec.config, GStreamerConfig) else 5000
        self._timeout_ns = timeout_ms * 1_000_000

    def open(self) -> None:
        gst = _gst()
        try:
            pipeline = gst.parse_launch(pipeline_description(self.spec.uri))
        except Exception as exc:  # GLib.Error; not importable without gi
            raise SourceError(f"GStreamer pipeline does not parse: {exc}") from None
        sink = pipeline.get_by_name(_SINK)
        if sink is None:
            raise SourceError(f"GStreamer pipeline has no appsink named {_SINK}")
        if pipeline.set_state(gst.State.PLAYING) == gst.StateChangeReturn.FAILURE:
            pipeline.set_state(gst.State.NULL)
            raise SourceUnavailable(
                "GStreamer pipeline failed to start (device busy or gone? check elements and caps)",
                reason=HealthReason.UNREACHABLE,
            )
        self._pipeline, self._sink = pipeline, sink
        self._pending = self._pull(None)  # learn the frame size from the first sample

    def _pull(self, out: np.ndarray | None) -> np.ndarray | None:
        gst = _gst()
        sample = self._sink.emit("try-pull-sample", self._timeout_ns)
        if sample is None:
            if self._sink.get_property("eos"):
                return None
            raise SourceDisconnected("no sample within the timeout", reason=HealthReason.TIMEOUT)
        caps = sample.get_caps().get_structure(0)
        w, h = caps.get_value("width"), caps.get_value("height")
        buf = sample.get_buffer()
        ok, info = buf.map(gst.MapFlags.READ)
        if not ok:
            raise SourceDisconnected("cannot map buffer", reason=HealthReason.DECODE_ERROR)
        try:
            stride = len(info.data) // h
            view = np.frombuffer(info.data, np.uint8, count=h * stride).reshape(h, stride)[:, : w * 3]
            target = out if out is not None and out.shape == (h, w, 3) else np.empty((h, w, 3), np.uint8)
            np.copyto(target, view.reshape(h, w, 3))
            self.copies += 1
        finally:
            buf.unmap(info)
        return target

    def frame_shape(self) -> tuple[int, int] | None:
        return None if self._pending is None else (self._pending.shape[0], self._pending.shape[1])

    def read(self, out: np.ndarray | None) -> np.ndarray | None:
        if self._pending is not None:
            frame, self._pending = self._pending, None
            if out is not None and out.shape == frame.shape:
                np.copyto(out, frame)
                self.copies += 1
                return out
            return frame
        return self._pull(out)  # None at EOS: the pipeline ended (num-buffers, a file); errors raise

    def close(self) -> None:
        if self._pipeline is not None:
            self._pipeline.set_state(_gst().State.NULL)
            self._pipeline = self._sink = None
