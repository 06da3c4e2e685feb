"""NVDEC source (``nvdec:clip.mp4``): frames decoded on the GPU's video engines never touch host memory.

The CUDA pieces it uses (device arrays, memory, streams) are the CUDA layer's, in ``_cuda/``.

By default PyNvVideoCodec's ``Demuxer`` and ``Decoder`` run on the source's own thread. ``?prefetch=N``
(opt-in, 1..64 frames) hands demuxing and decoding to PyNvVideoCodec's ``ThreadedDecoder``, which works
N frames ahead on its own C++ thread, so the source's Python thread only takes decoded frames and
demuxing no longer holds the GIL that the inference and post-processing threads wait for. On the H200
that lifted 16-stream ResNet-50 from 3978 to 4762 frames/s and NanoDet from 3377 to 4646, to the video
decoders' ceiling (bench/results/h200-prefetch-ab.json). It is not the default because it is not yet
proven safe: one long benchmark process aborted with heap corruption inside it, and a 64-stream
open/read/close stress crashed once in three runs without the lock below (none in five with it); and it
hurt 64 paced streams' p95 latency (72-117 ms against 38-40 ms). See docs/gpu.md.

PyNvVideoCodec reuses a frame's surface on its next call, so each frame is moved once, device to device
(NV12, 1.5 bytes a pixel, one 2-D copy when both sides keep the chroma plane right after the luma
plane), into a slot of this stream's device frame pool; that slot travels through the pipeline like a
host slot does, and the fused kernel converts NV12 while it resizes. The move is counted as
``device_to_device``; nothing is counted ``host_to_device``. Options: ``?gpu=N`` (default 0),
``?matrix=bt601|bt709`` (default ``bt601``, what OpenCV assumes), ``?loop=1`` (repeats the file; with
prefetching the decoder is rewound, not re-created), ``?prefetch=N`` (0..64; frames of ~3 MB each at
1080p, per stream, in device memory).
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from .._cuda._array import DeviceImage
from .._cuda._bindings import Stream, check, cudart, driver, use_device
from .._cuda._memory import device_image_allocator
from .._errors import EdgefleetError, SourceError
from .._frames import Allocator
from ._base import Source, SourceSpec
from ._configs import NvdecConfig

__all__ = ["NvdecSource"]

_LIFECYCLE = threading.Lock()
"""Serialises creating, rewinding and ending ThreadedDecoders across streams: a guard against shared
state inside PyNvVideoCodec (its decoder cache), which the stress runs suggest is not thread-safe."""

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
        config = spec.config
        if not isinstance(config, NvdecConfig):
            raise SourceError(f"{spec.uri}: an nvdec source needs an NvdecConfig, got {type(config).__name__}")
        self.ordinal, self.matrix, self.prefetch = config.gpu, config.matrix, config.prefetch
        self._threaded: Any = None
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
        threaded = self.prefetch > 0 and hasattr(nvc, "ThreadedDecoder")
        if self.prefetch > 0 and not threaded:
            _log.warning("%s: this PyNvVideoCodec has no ThreadedDecoder; prefetch ignored", self.stream_id)
        try:
            use_device(self.ordinal)
            ctx = int(check(driver().cuCtxGetCurrent(), "cuCtxGetCurrent"))
            self._stream = Stream(self.ordinal)
            if threaded:
                with _LIFECYCLE:
                    self._threaded = nvc.ThreadedDecoder(
                        self.spec.uri,
                        buffer_size=self.prefetch,
                        gpu_id=self.ordinal,
                        cuda_context=ctx,
                        cuda_stream=self._stream.handle,
                        use_device_memory=True,
                    )
                meta = self._threaded.get_stream_metadata()
                w, h, fps = int(meta.width), int(meta.height), float(meta.average_fps)
            else:
                self._demuxer = nvc.CreateDemuxer(filename=self.spec.uri)
                self._decoder = nvc.CreateDecoder(
                    gpuid=self.ordinal,
                    codec=self._demuxer.GetNvCodecId(),
                    cudacontext=ctx,
                    cudastream=self._stream.handle,
                    usedevicememory=True,
                )
                w, h = int(self._demuxer.Width()), int(self._demuxer.Height())
                fps = float(self._demuxer.FrameRate())
                self._packets = iter(self._demuxer)
        except EdgefleetError:
            raise
        except Exception as exc:  # PyNvVideoCodec raises plain exceptions
            self.close()
            raise SourceError(f"{self.spec.uri}: NVDEC cannot open it: {str(exc).splitlines()[0]}") from None
        self._shape = (h, w) if w > 0 and h > 0 else None
        self._fps = fps if 0 < fps < 1000 else None
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
        """The next decoded frame (valid until the decoder's next call), or None at the end."""
        while not self._pending:
            if self._eof:
                return None
            try:
                if self._threaded is not None:
                    frames = self._threaded.get_batch_frames(1)
                    if not frames:
                        self._eof = True
                    self._pending.extend(frames)
                    continue
                packet = next(self._packets, None)
                if packet is None:
                    self._eof = True
                    self._flush()
                    continue
                self._pending.extend(self._decoder.Decode(packet))
            except Exception as exc:
                raise SourceError(f"{self.spec.uri}: NVDEC decode failed: {str(exc).splitlines()[0]}") from None
        return self._pending.popleft()

    def _rewind(self) -> None:
        """Back to the first frame for ``loop``: the prefetching decoder is rewound (its session kept);
        the other is closed and opened again."""
        if self._threaded is None:
            self.close()
            self.open()
            return
        try:
            with _LIFECYCLE:
                self._threaded.reconfigure_decoder(self.spec.uri, 0)
        except Exception as exc:
            raise SourceError(f"{self.spec.uri}: NVDEC cannot rewind it: {str(exc).splitlines()[0]}") from None
        self._pending.clear()
        self._eof = False

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
        if self._threaded is None and self._decoder is None:
            raise SourceError(f"{self.spec.uri}: not open")
        frame = self._next_decoded()
        if frame is None and self.spec.loop:
            self._rewind()
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
        if uv_ptr == y_ptr + y_pitch * h and uv_pitch == y_pitch and out.uv_ptr == out.ptr + out.pitch * h:
            # both sides hold chroma right after luma at one pitch: one copy of the 1.5 H rows
            check(rt.cudaMemcpy2DAsync(out.ptr, out.pitch, y_ptr, y_pitch, w, h + uv_h, d2d, s), "cudaMemcpy2DAsync")
        else:
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
        threaded, self._threaded = self._threaded, None
        if threaded is not None:
            try:
                with _LIFECYCLE:
                    threaded.end()  # stops and joins its decoding thread
                    del threaded  # and frees the decoder under the lock too
            except Exception:  # already ended, or the decoder failed before
                _log.debug("ThreadedDecoder.end failed", exc_info=True)
        self._decoder = None
        self._demuxer = None
        self._packets = None
