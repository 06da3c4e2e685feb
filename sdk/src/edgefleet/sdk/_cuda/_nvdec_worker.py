"""The process behind an ``nvdec:clip.mp4?process=1`` source (``python -m edgefleet.sdk._cuda._nvdec_worker
FD SPEC``): it demuxes and decodes one stream with its own interpreter, so its GIL is not the pipeline's,
and writes each frame straight into the pipeline's device slot, mapped through a CUDA IPC handle.

Protocol on the socket FD (one :class:`~edgefleet.sdk._cuda._ipc.Channel` message each):

* worker → ``H`` + JSON ``{"shape": [h, w] | null, "fps": float | null}`` once open, or ``X`` + error text;
* pipeline → ``F`` + slot handle (64 bytes) + ``<III`` pitch, width, height: decode the next frame into
  that slot; worker → ``D`` (done: the copy has completed), ``E`` (end of the clip) or ``X`` + error text;
* pipeline → ``Q``, or closing the socket: the worker exits.

After each ``D`` the worker decodes the next frame ahead, so only the device-to-device move is left when
the next request comes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import struct
import sys

from .._errors import EdgefleetError
from .._sources._base import SourceSpec
from ._array import DeviceArray, DeviceImage
from ._ipc import HANDLE_BYTES, Channel, ChannelClosed, IpcMapping

__all__ = ["FILL", "main"]

FILL = struct.Struct("<III")  # pitch, width, height after the handle

_log = logging.getLogger(__name__)


def _first_line(exc: BaseException) -> bytes:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return b"X" + text.encode("utf-8", "replace")


def serve(chan: Channel, spec: SourceSpec) -> int:
    from ._nvdec import NvdecSource

    source = NvdecSource(spec)
    try:
        source.open()
    except EdgefleetError as exc:
        chan.send(_first_line(exc))
        return 1
    ordinal = source.ordinal
    chan.send(b"H" + json.dumps({"shape": source.frame_shape(), "fps": source.nominal_fps()}).encode())
    slots: dict[bytes, tuple[IpcMapping, DeviceImage]] = {}
    ahead: BaseException | None = None  # an error met while decoding ahead, reported at the next request
    try:
        while True:
            msg = chan.recv()
            if msg[:1] != b"F":
                return 0  # "Q", or a stranger: stop
            if ahead is not None:
                chan.send(_first_line(ahead))
                return 1
            handle = msg[1 : 1 + HANDLE_BYTES]
            pitch, width, height = FILL.unpack_from(msg, 1 + HANDLE_BYTES)
            if handle not in slots:
                mapping = IpcMapping(handle, ordinal)
                buffer = DeviceArray(mapping.ptr, (height * 3 // 2, pitch), "uint8", ordinal, mapping)
                slots[handle] = (mapping, DeviceImage(buffer, width, height, "NV12", pitch))
            try:
                image = source.read(slots[handle][1])
            except EdgefleetError as exc:
                chan.send(_first_line(exc))
                return 1
            chan.send(b"D" if image is not None else b"E")
            try:
                source.prefetch()
            except EdgefleetError as exc:
                ahead = exc
    except ChannelClosed:
        return 0  # the pipeline went away
    finally:
        source.close()
        for mapping, _ in slots.values():
            mapping.close()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the pipeline stops us
    logging.basicConfig(level=logging.WARNING, format="nvdec-worker: %(message)s")
    fd, raw = int(argv[0]), json.loads(argv[1])
    chan = Channel(socket.socket(fileno=fd))
    spec = SourceSpec(
        uri=raw["uri"],
        kind="nvdec",
        stream_id=raw["stream_id"],
        live=False,
        options=raw["options"],
        loop=raw["loop"],
    )
    try:
        return serve(chan, spec)
    except ChannelClosed:
        return 0
    except Exception as exc:  # anything else still reaches the pipeline as one line
        _log.debug("NVDEC worker failed", exc_info=True)
        with contextlib.suppress(ChannelClosed):
            chan.send(_first_line(exc))
        return 1
    finally:
        chan.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
