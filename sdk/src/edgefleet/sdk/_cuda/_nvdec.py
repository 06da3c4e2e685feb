"""NVDEC source (``nvdec:clip.mp4``): PyNvVideoCodec demuxes on the CPU and decodes on the GPU's video
engines; frames never touch host memory.

PyNvVideoCodec reuses its output surfaces on the next ``Decode`` call, so each frame is moved once,
device to device (NV12, 1.5 bytes a pixel, at device bandwidth: microseconds for 1080p), into a slot of
this stream's device frame pool; that slot travels through the pipeline like a host slot does, and the
fused kernel converts NV12 while it resizes. The move is counted as ``device_to_device``; nothing is
counted ``host_to_device``. Options: ``?gpu=N`` (default 0), ``?matrix=bt601|bt709`` (default
``bt601``, what OpenCV assumes), ``?loop=1``.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

from .._errors import EdgefleetError, SourceError
from .._frames import Allocator
from .._sources._base import Source, SourceSpec
from ._array import DeviceImage
from ._memory import device_image_allocator
from ._runtime import Stream, check, cudart, driver, use_device

__all__ = ["NvdecSource"]

_log = logging.getLogger(__name__)


def _nvc() -> Any:
    try:
        import PyNvVideoCodec
    except ImportError as exc:
        raise SourceError("nvdec sources need PyNvVideoCodec: pip install pynvvideocodec") from exc
    except RuntimeError as exc:  # raised by its driver check (no NVDEC/NVENC driver libraries)
        raise SourceError(f"PyNvVideoCodec cannot start: {str(exc).splitlines()[0]}") from None
    return PyNvVideoCodec


def _plane(cai_owner: Any) -> tuple[int, int, int, int]:
    """(pointer, height, width, pitch) of one CAI plane view."""
    cai = cai_owner.__cuda_array_interface__
    shape, strides = cai["shape"], cai.get("strides")
    pitch = int(strides[0]) if strides else int(shape[1]) * (int(shape[2]) if len(shape) > 2 else 1)
    return int(cai["data"][0]), int(shape[0]), int(shape[1]), pitch


class NvdecSource(Source):
    copy_kind = "device_to_device"

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self.ordinal = int(spec.options.get("gpu", "0"))
        self.matrix = spec.options.get("matrix", "bt601")
        if self.matrix not in ("bt601", "bt709"):
            raise SourceError(f"{spec.uri}: option matrix must be bt601 or bt709")
        self._demuxer: Any = None
        self._decoder: Any = None
        self._packets: Any = None
        self._pending: collections.deque[Any] = collections.deque()
        self._stream: Stream | None = None
        self._shape: tuple[int, int] | None = None
        self._fps: float | None = None
        self._eof = False

    def frame_allocator(self, default: Allocator) -> Allocator:
        """Device NV12 slots, not host ones."""
        return device_image_allocator(f"cuda:{self.ordinal}", "NV12")

    def open(self) -> None:
        nvc = _nvc()
        try:
            use_device(self.ordinal)
            ctx = check(driver().cuCtxGetCurrent(), "cuCtxGetCurrent")
            self._stream = Stream(self.ordinal)
            self._demuxer = nvc.CreateDemuxer(filename=self.spec.uri)
            self._decoder = nvc.CreateDecoder(
                gpuid=self.ordinal,
                codec=self._demuxer.GetNvCodecId(),
                cudacontext=int(ctx),
                cudastream=self._stream.handle,
                usedevicememory=True,
            )
        except EdgefleetError:
            raise
        except Exception as exc:  # PyNvVideoCodec raises plain exceptions
            raise SourceError(f"{self.spec.uri}: NVDEC cannot open it: {str(exc).splitlines()[0]}") from None
        w, h = int(self._demuxer.Width()), int(self._demuxer.Height())
        self._shape = (h, w) if w > 0 and h > 0 else None
        fps = float(self._demuxer.FrameRate())
        self._fps = fps if 0 < fps < 1000 else None
        self._packets = iter(self._demuxer)
        self._pending.clear()
        self._eof = False
        # Decode up to the first frame now: the decoder session itself is created on the first sequence
        # header, and the driver serialises session creation (~55 ms each on the H200: 3.4 s for 64
        # streams opening at once). Here it is part of opening, before a realtime source starts its clock.
        first = self._next_decoded()
        if first is not None:
            self._pending.appendleft(first)

    def frame_shape(self) -> tuple[int, int] | None:
        return self._shape

    def nominal_fps(self) -> float | None:
        return self._fps

    def _next_decoded(self) -> Any:
        while not self._pending:
            if self._eof:
                return None
            packet = next(self._packets, None)
            if packet is None:
                self._eof = True
                self._flush()
                continue
            try:
                self._pending.extend(self._decoder.Decode(packet))
            except Exception as exc:
                raise SourceError(f"{self.spec.uri}: NVDEC decode failed: {str(exc).splitlines()[0]}") from None
        return self._pending.popleft()

    def _flush(self) -> None:
        """Drain the decoder at the end of the file (the demuxer's last, empty packet usually has)."""
        packet_type = getattr(_nvc(), "PacketData", None)
        if packet_type is None:
            return
        try:
            self._pending.extend(self._decoder.Decode(packet_type()))
        except Exception:  # already flushed, or this version flushes on its own
            _log.debug("NVDEC flush packet refused", exc_info=True)

    def read(self, out: Any) -> Any:
        if self._decoder is None:
            raise SourceError(f"{self.spec.uri}: not open")
        frame = self._next_decoded()
        if frame is None and self.spec.loop:
            self.close()
            self.open()
            frame = self._next_decoded()
        if frame is None:
            return None
        if not isinstance(out, DeviceImage) or out.fmt != "NV12":
            raise SourceError(f"{self.spec.uri}: NVDEC frames go into device NV12 slots only")
        planes = frame.cuda()
        y_ptr, h, w, y_pitch = _plane(planes[0])
        if (h, w) != (out.height, out.width):
            raise SourceError(f"{self.spec.uri}: frame is {w}x{h}, the pool's slots are {out.width}x{out.height}")
        uv_ptr, uv_h, _, uv_pitch = _plane(planes[1]) if len(planes) > 1 else (y_ptr + y_pitch * h, h // 2, w, y_pitch)
        rt = cudart()
        d2d = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        assert self._stream is not None
        s = self._stream.raw
        check(rt.cudaMemcpy2DAsync(out.ptr, out.pitch, y_ptr, y_pitch, w, h, d2d, s), "cudaMemcpy2DAsync luma")
        check(
            rt.cudaMemcpy2DAsync(out.uv_ptr, out.pitch, uv_ptr, uv_pitch, w, uv_h, d2d, s),
            "cudaMemcpy2DAsync chroma",
        )
        self._stream.synchronize()
        out.matrix = self.matrix
        self.copies += 1
        return out

    def close(self) -> None:
        self._pending.clear()
        self._decoder = None
        self._demuxer = None
        self._packets = None
