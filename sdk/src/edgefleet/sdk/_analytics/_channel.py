"""The pipeline's end of the socket pair to its analytics process (``_remote``).

Framed as :class:`multiprocessing.connection.Connection` frames a message (a 4-byte big-endian length,
-1 and an 8-byte one past 2 GiB, then the bytes), so the process reads and writes with a plain
``Connection``. This end makes as few system calls as it can: every one lets go of the GIL and takes it
back, and at 64 streams taking it back waits behind the source threads, which slows the whole pipeline
(docs/gpu.md). A message goes out in one ``sendmsg``; an answer comes in with one ``recv_into`` when it
is there whole (``Connection`` reads the length and the bytes apart, and polls through a selector it
makes for each call); a poll is one call on a ``select.poll`` kept open.
"""

from __future__ import annotations

import math
import select
import socket
import struct

__all__ = ["Channel"]

_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!Q")


class Channel:
    """Messages of bytes over a connected stream socket (blocking, one reader, one writer at a time)."""

    def __init__(self, sock: socket.socket, buffer: int = 1 << 20) -> None:
        sock.setblocking(True)
        self._sock = sock
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLIN)
        self._buf = bytearray(buffer)
        self._have = 0  # bytes received and not yet given out

    def send(self, payload: bytes) -> None:
        n = len(payload)
        header = _SHORT.pack(n) if n <= 0x7FFFFFFF else _SHORT.pack(-1) + _LONG.pack(n)
        sent = self._sock.sendmsg([header, payload])
        if sent < len(header) + n:  # a full socket buffer: the rest the slow way
            self._sock.sendall(memoryview(header + payload)[sent:])

    def ready(self, timeout: float) -> bool:
        """Whether a message (or the end of the stream) is there, waiting up to ``timeout`` seconds."""
        size, start = self._frame()
        if size is not None and self._have >= start + size:
            return True
        return bool(self._poller.poll(math.ceil(timeout * 1000)))

    def recv(self, timeout: float) -> bytes:
        """The next message. Raises TimeoutError when nothing comes for ``timeout`` seconds, EOFError when
        the other end closed. What is there already is read without a poll first."""
        while True:
            size, start = self._frame()
            if size is not None:
                end = start + size
                if self._have >= end:
                    message = bytes(memoryview(self._buf)[start:end])
                    rest = self._have - end
                    self._buf[:rest] = self._buf[end : self._have]
                    self._have = rest
                    return message
                if len(self._buf) < end:
                    self._buf.extend(bytes(end - len(self._buf)))
            try:
                n = self._sock.recv_into(memoryview(self._buf)[self._have :], 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if not self._poller.poll(math.ceil(timeout * 1000)):
                    raise TimeoutError from None
                continue
            if n == 0:
                raise EOFError
            self._have += n

    def _frame(self) -> tuple[int | None, int]:
        """The size of the message at the front and where its bytes start (None: its length is not in)."""
        if self._have < 4:
            return None, 4
        (size,) = _SHORT.unpack_from(self._buf)
        if size != -1:
            return size, 4
        if self._have < 12:
            return None, 12
        return _LONG.unpack_from(self._buf, 4)[0], 12

    def close(self) -> None:
        self._sock.close()
