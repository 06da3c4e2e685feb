"""Between processes: device memory shared through CUDA IPC handles, and a framed message channel.

A process exports ``cudaMalloc`` memory with :func:`export_handle` (64 opaque bytes); another process on
the same machine maps it with :class:`IpcMapping` and reads or writes it in place, no copy. The two talk
over a :class:`Channel`: length-prefixed messages on a Unix stream socket, whose blocking calls give the
GIL up while they wait.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import struct
from typing import Any

from .._errors import BackendError
from ._runtime import check, cudart, use_device

__all__ = ["HANDLE_BYTES", "Channel", "ChannelClosed", "IpcMapping", "export_handle"]

HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
_LEN = struct.Struct("<I")
_MAX_MESSAGE = 1 << 20


class ChannelClosed(Exception):  # noqa: N818 - a signal: the other end is gone
    """The other end closed its socket (it exited, or is exiting)."""


class Channel:
    """Length-prefixed messages over a connected stream socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, payload: bytes) -> None:
        try:
            self.sock.sendall(_LEN.pack(len(payload)) + payload)
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None

    def _exactly(self, n: int) -> bytes:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:])
            except TimeoutError:  # an OSError too, but the caller's to handle
                raise
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if k == 0:
                raise ChannelClosed("end of stream")
            got += k
        return bytes(buf)

    def recv(self, timeout: float | None = None) -> bytes:
        """The next message. Raises ChannelClosed when the other end is gone, TimeoutError after
        ``timeout`` seconds without a whole message (None: wait for ever)."""
        self.sock.settimeout(timeout)
        (n,) = _LEN.unpack(self._exactly(_LEN.size))
        if n > _MAX_MESSAGE:
            raise ChannelClosed(f"message of {n} bytes: not a peer of this protocol")
        return self._exactly(n) if n else b""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def export_handle(ptr: int) -> bytes:
    """The IPC handle of the ``cudaMalloc`` allocation that starts at ``ptr``."""
    handle = check(cudart().cudaIpcGetMemHandle(ptr), "cudaIpcGetMemHandle")
    return ctypes.string_at(handle.getPtr(), HANDLE_BYTES)


class IpcMapping:
    """Another process's device allocation, mapped into this one until :meth:`close`."""

    def __init__(self, handle: bytes, ordinal: int) -> None:
        if len(handle) != HANDLE_BYTES:
            raise BackendError(f"a CUDA IPC handle has {HANDLE_BYTES} bytes, got {len(handle)}")
        rt = cudart()
        use_device(ordinal)
        raw: Any = rt.cudaIpcMemHandle_t()
        ctypes.memmove(raw.getPtr(), handle, HANDLE_BYTES)
        self.ordinal = ordinal
        self.ptr = int(check(rt.cudaIpcOpenMemHandle(raw, rt.cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle"))

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with contextlib.suppress(Exception):  # interpreter shutdown, or the exporter already exited
                cudart().cudaIpcCloseMemHandle(ptr)

    def __del__(self) -> None:
        self.close()
