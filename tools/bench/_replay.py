"""A benchmark-only NVDEC source (``replay:clip.mp4``, ``--decoders nvdec-replay``): the clip's first
``frames`` frames are decoded once by PyNvVideoCodec, shared by every stream of the process, and then
replayed from device memory, each read one device-to-device copy into the stream's slot (cycling; the
pipeline's ``max_frames`` ends a stream).

What it is for: the default NVDEC source demuxes and decodes on its Python thread under the GIL
(PyNvVideoCodec holds it), 57-60 % of the pipeline's GIL samples at 64 streams (docs/gpu.md). With the
same frames and detections but a source that holds the GIL only for the copy's few calls, a
with/without-analytics pair tells what the analytics stages cost a pipeline whose GIL is not taken by
its decoder library.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from pydantic import Field

from edgefleet.sdk._cuda._array import DeviceImage
from edgefleet.sdk._cuda._bindings import Stream, check, cudart, use_device
from edgefleet.sdk._errors import SourceError
from edgefleet.sdk._sources import Source, SourceSpec, register_source
from edgefleet.sdk._sources._configs import NvdecConfig, _parse_nvdec
from edgefleet.sdk._sources._nvdec import NvdecSource

__all__ = ["ReplayConfig", "ReplaySource", "register"]

_LOCK = threading.Lock()
_DECODED: dict[tuple[str, int, int], tuple[list[DeviceImage], float | None]] = {}


class ReplayConfig(NvdecConfig):
    type: Literal["nvdec-replay"] = "nvdec-replay"  # type: ignore[assignment]
    frames: int = Field(300, ge=1, le=1800, description="Frames decoded once and replayed (~3 MB each at 1080p)")


class ReplaySource(NvdecSource):
    def open(self) -> None:
        config = self.spec.config
        assert isinstance(config, ReplayConfig)
        key = (str(config.path), self.ordinal, config.frames)
        with _LOCK:  # the first stream decodes; the others wait for its frames
            if key not in _DECODED:
                _DECODED[key] = self._decode(config.frames)
        self._frames, self._fps = _DECODED[key]
        if not self._frames:
            raise SourceError(f"{self.spec.uri}: no frames decoded")
        first = self._frames[0]
        self._shape, self._next = (first.height, first.width), 0
        use_device(self.ordinal)
        self._stream = Stream(self.ordinal)

    def _decode(self, count: int) -> tuple[list[DeviceImage], float | None]:
        super().open()
        try:
            frames: list[DeviceImage] = []
            shape = self.frame_shape()
            if shape is None:
                raise SourceError(f"{self.spec.uri}: no frame size")
            while len(frames) < count:
                slot = DeviceImage.empty(shape[1], shape[0], "NV12", self.ordinal)
                if super().read(slot) is None:
                    break
                frames.append(slot)
            return frames, self.nominal_fps()
        finally:
            super().close()

    def read(self, out: Any) -> Any:
        src = self._frames[self._next]
        self._next = (self._next + 1) % len(self._frames)
        if not isinstance(out, DeviceImage) or (out.pitch, out.height) != (src.pitch, src.height):
            raise SourceError(f"{self.spec.uri}: replayed frames go into device NV12 slots of their size")
        rt = cudart()
        assert self._stream is not None
        kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        check(rt.cudaMemcpyAsync(out.ptr, src.ptr, src.nbytes, kind, self._stream.raw), "cudaMemcpyAsync")
        self._stream.synchronize()
        out.matrix = self.matrix
        self.copies += 1
        return out

    def close(self) -> None:
        self._stream = None  # the decoded frames stay, for the next cell's streams


def _parse(text: str) -> dict[str, Any]:
    """``replay:`` takes what ``nvdec:`` takes (and says the same when the file is missing)."""
    return _parse_nvdec("nvdec:" + text[len("replay:") :])


def _factory(config: Any, spec: SourceSpec) -> Source:
    return ReplaySource(spec)


def register() -> None:
    register_source("nvdec-replay", ReplayConfig, _factory, replace=True, prefixes=("replay:",), parse=_parse)
