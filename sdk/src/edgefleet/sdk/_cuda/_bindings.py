"""cuda-python runtime access: lazy import, error translation, device selection, streams and events.

Every call goes through :func:`check`, which turns a CUDA error code into :class:`CudaError` (a
:class:`~edgefleet.sdk.BackendError`) naming the call. Threads make the pipeline's device current with
:func:`use_device` before their first CUDA call; the runtime's primary context is shared with ONNX
Runtime, TensorRT and PyNvVideoCodec, so device pointers move freely between them.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass
from typing import Any

from .._errors import BackendError, BackendUnavailableError

__all__ = [
    "CudaError",
    "DeviceInfo",
    "Event",
    "Stream",
    "check",
    "cudart",
    "device_info",
    "driver",
    "parse_device",
    "use_device",
]

_INSTALL = "pip install 'edgefleet-sdk[cuda]' (cuda-python)"


class CudaError(BackendError):
    """A CUDA runtime/driver call failed."""


@functools.cache
def cudart() -> Any:
    """The ``cuda.bindings.runtime`` module; BackendUnavailableError when cuda-python is missing."""
    try:
        from cuda.bindings import runtime
    except ImportError as exc:
        raise BackendUnavailableError(f"the GPU path needs cuda-python: {_INSTALL}") from exc
    return runtime


@functools.cache
def driver() -> Any:
    """The ``cuda.bindings.driver`` module."""
    try:
        from cuda.bindings import driver as drv
    except ImportError as exc:
        raise BackendUnavailableError(f"the GPU path needs cuda-python: {_INSTALL}") from exc
    return drv


def _name(err: Any) -> str:
    try:
        rt = cudart()
        if isinstance(err, rt.cudaError_t):
            _, text = rt.cudaGetErrorString(err)
            return f"{err.name}: {text.decode() if isinstance(text, bytes) else text}"
    except Exception:  # noqa: S110 - best effort for an error message
        pass
    return str(getattr(err, "name", err))


def check(result: Any, what: str = "CUDA call") -> Any:
    """Unpack a cuda-python ``(err, *values)`` tuple: raise on error, return the value(s)."""
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if int(err) != 0:
        raise CudaError(f"{what} failed: {_name(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    uuid: str
    major: int
    minor: int
    integrated: bool
    total_memory: int
    multiprocessors: int

    @property
    def arch(self) -> str:
        return f"sm_{self.major}{self.minor}"


def _uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@functools.cache
def device_info(ordinal: int) -> DeviceInfo:
    rt = cudart()
    prop = check(rt.cudaGetDeviceProperties(ordinal), f"cudaGetDeviceProperties({ordinal})")
    name = prop.name.decode(errors="replace") if isinstance(prop.name, bytes) else str(prop.name)
    raw = bytes(prop.uuid.bytes) if hasattr(prop.uuid, "bytes") else b""
    raw = bytes(b & 0xFF for b in raw)
    return DeviceInfo(
        ordinal=ordinal,
        name=name.rstrip("\x00"),
        uuid=_uuid_text(raw) if len(raw) == 16 else "",
        major=int(prop.major),
        minor=int(prop.minor),
        integrated=bool(prop.integrated),
        total_memory=int(prop.totalGlobalMem),
        multiprocessors=int(prop.multiProcessorCount),
    )


def device_count() -> int:
    return int(check(cudart().cudaGetDeviceCount(), "cudaGetDeviceCount"))


def parse_device(device: str) -> int:
    """``cuda``, ``cuda:N``, ``cuda:GPU-<uuid>`` or ``cuda:MIG-<uuid>`` → the CUDA ordinal.

    A MIG instance is only visible to CUDA through ``CUDA_VISIBLE_DEVICES=MIG-<uuid>`` set before the
    process starts; it then appears as ordinal 0, so ``cuda:0`` selects it.
    """
    if device in ("cuda", "gpu"):
        return 0
    if not device.startswith("cuda:"):
        raise BackendError(f"not a CUDA device: {device!r} (expected cuda:N or cuda:GPU-<uuid>)")
    ident = device[5:]
    if ident.isdigit():
        n = int(ident)
        count = device_count()
        if n >= count:
            raise BackendError(f"{device}: only {count} CUDA device(s) visible")
        return n
    if ident.upper().startswith("MIG-"):
        raise BackendError(
            f"{device}: select a MIG instance with CUDA_VISIBLE_DEVICES={ident} before starting the "
            "process, then use cuda:0"
        )
    wanted = ident.lower()
    wanted = wanted if wanted.startswith("gpu-") else f"gpu-{wanted}"
    for n in range(device_count()):
        if device_info(n).uuid.lower() == wanted:
            return n
    raise BackendError(f"{device}: no visible GPU has this UUID")


_local = threading.local()


def use_device(ordinal: int) -> None:
    """Make ``ordinal``'s primary context current on this thread (cheap after the first call)."""
    if getattr(_local, "device", None) != ordinal:
        rt = cudart()
        check(rt.cudaSetDevice(ordinal), f"cudaSetDevice({ordinal})")
        check(rt.cudaFree(0), "cudaFree(0) (context init)")
        _local.device = ordinal


class Stream:
    """A non-blocking CUDA stream owned by one component (preprocessor, backend, decoder)."""

    def __init__(self, ordinal: int) -> None:
        rt = cudart()
        use_device(ordinal)
        self.ordinal = ordinal
        self._stream: Any = check(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking), "cudaStreamCreateWithFlags")

    @property
    def handle(self) -> int:
        """The raw ``cudaStream_t`` as an integer (what ORT, TensorRT and CAI ``stream`` take)."""
        return int(self._stream) if self._stream is not None else 0

    @property
    def raw(self) -> Any:
        return self._stream

    def synchronize(self) -> None:
        check(cudart().cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")

    def wait(self, event: Event) -> None:
        check(cudart().cudaStreamWaitEvent(self._stream, event.raw, 0), "cudaStreamWaitEvent")

    def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with contextlib.suppress(Exception):  # interpreter shutdown
                cudart().cudaStreamDestroy(stream)

    def __del__(self) -> None:
        self.close()


class Event:
    """A CUDA event (timing disabled unless asked: cheaper to record and wait on)."""

    def __init__(self, timing: bool = False) -> None:
        rt = cudart()
        flags = rt.cudaEventDefault if timing else rt.cudaEventDisableTiming
        self._event: Any = check(rt.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags")

    @property
    def raw(self) -> Any:
        return self._event

    def record(self, stream: Stream | int) -> None:
        s = stream.raw if isinstance(stream, Stream) else stream
        check(cudart().cudaEventRecord(self._event, s), "cudaEventRecord")

    def synchronize(self) -> None:
        check(cudart().cudaEventSynchronize(self._event), "cudaEventSynchronize")

    def elapsed_ms(self, end: Event) -> float:
        return float(check(cudart().cudaEventElapsedTime(self._event, end.raw), "cudaEventElapsedTime"))

    def close(self) -> None:
        if self._event is not None:
            ev, self._event = self._event, None
            with contextlib.suppress(Exception):  # interpreter shutdown
                cudart().cudaEventDestroy(ev)

    def __del__(self) -> None:
        self.close()
