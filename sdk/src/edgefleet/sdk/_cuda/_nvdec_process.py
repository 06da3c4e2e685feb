"""NVDEC in a worker process (``nvdec:clip.mp4?process=1``): the same decoding as :class:`NvdecSource`,
run by a child Python process per stream, so demuxing and decoder set-up and tear-down hold the child's
GIL instead of the pipeline's.

The frame pool stays in the pipeline's process (device NV12 slots, as with the in-process source). Each
slot is exported once as a CUDA IPC handle; for every frame the source sends the slot's handle and the
worker decodes into it, waits for its copy to complete and answers. Nothing but a few bytes a frame
crosses the socket, and the pixels move once, device to device, as before. The worker decodes the next
frame while the pipeline works on this one.

Costs: a process, an interpreter and a CUDA context per stream (on the H200 about 0.5 GB of device
memory each), and a second or so to start. On a discrete GPU with many streams this is what keeps the
pipeline's GIL for the pipeline; with one or two streams the in-process source is as fast.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from .._errors import SourceError
from .._frames import Allocator
from .._sources._base import Source, SourceSpec
from ._array import DeviceAllocation, DeviceImage
from ._ipc import Channel, ChannelClosed, export_handle
from ._memory import device_image_allocator
from ._nvdec_worker import FILL

__all__ = ["NvdecProcessSource"]

_log = logging.getLogger(__name__)

#: how long a worker may take to start, open the clip and decode its first frame (the driver serialises
#: NVDEC session creation: ~55 ms each on the H200, so 64 streams opening at once wait ~3.5 s)
OPEN_TIMEOUT_S = 120.0
#: how long one frame may take before the worker is taken for stuck
READ_TIMEOUT_S = 30.0
_FILL_HEADER = b"F"


def _package_root() -> str:
    """The folder holding the ``edgefleet`` package this SDK was imported from (for the child's path)."""
    return str(Path(__file__).resolve().parents[3])


class NvdecProcessSource(Source):
    copy_kind = "device_to_device"

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self.ordinal = int(spec.options.get("gpu", "0"))
        self.matrix = spec.options.get("matrix", "bt601")
        if self.matrix not in ("bt601", "bt709"):
            raise SourceError(f"{spec.uri}: option matrix must be bt601 or bt709")
        self._proc: subprocess.Popen[bytes] | None = None
        self._chan: Channel | None = None
        self._shape: tuple[int, int] | None = None
        self._fps: float | None = None
        self._handles: dict[int, tuple[DeviceAllocation, bytes]] = {}

    def frame_allocator(self, default: Allocator) -> Allocator:
        """Device NV12 slots, in this process (the worker maps them)."""
        return device_image_allocator(f"cuda:{self.ordinal}", "NV12")

    # --- the worker --------------------------------------------------------------------------------
    def open(self) -> None:
        self.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        options = {k: v for k, v in self.spec.options.items() if k != "process"}
        raw = {"uri": self.spec.uri, "stream_id": self.stream_id, "options": options, "loop": self.spec.loop}
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "edgefleet.sdk._cuda._nvdec_worker", str(theirs.fileno()), json.dumps(raw)],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:
            ours.close()
            raise SourceError(f"{self.spec.uri}: cannot start the NVDEC worker process: {exc}") from None
        finally:
            theirs.close()
        self._chan = Channel(ours)
        reply = self._receive(OPEN_TIMEOUT_S, "open the clip")
        if reply[:1] != b"H":
            self.close()
            raise SourceError(f"{self.spec.uri}: the NVDEC worker answered {reply[:16]!r} to opening")
        hello = json.loads(reply[1:])
        self._shape = tuple(hello["shape"]) if hello.get("shape") else None
        self._fps = hello.get("fps")

    def _receive(self, timeout: float, doing: str) -> bytes:
        """The worker's next message; its error text, its death or its silence as one SourceError."""
        assert self._chan is not None
        try:
            reply = self._chan.recv(timeout)
        except TimeoutError:
            self.close()
            raise SourceError(f"{self.spec.uri}: the NVDEC worker did not {doing} within {timeout:.0f} s") from None
        except ChannelClosed:
            code = self._reap()
            raise SourceError(
                f"{self.spec.uri}: the NVDEC worker exited (code {code}) before it could {doing}"
            ) from None
        if reply[:1] == b"X":
            self.close()
            raise SourceError(reply[1:].decode("utf-8", "replace"))
        return reply

    def _reap(self, timeout: float = 5.0) -> int | None:
        proc, self._proc = self._proc, None
        if self._chan is not None:
            self._chan.close()
            self._chan = None
        if proc is None:
            return None
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def frame_shape(self) -> tuple[int, int] | None:
        return self._shape

    def nominal_fps(self) -> float | None:
        return self._fps

    # --- frames ------------------------------------------------------------------------------------
    def _handle(self, image: DeviceImage) -> bytes:
        """The slot's IPC handle, exported once per allocation."""
        alloc = image.buffer.owner
        if not isinstance(alloc, DeviceAllocation) or alloc.ptr != image.ptr:
            raise SourceError(f"{self.spec.uri}: NVDEC worker slots must be whole device allocations")
        known = self._handles.get(image.ptr)
        if known is None or known[0] is not alloc:
            known = (alloc, export_handle(alloc.ptr))
            self._handles[image.ptr] = known
        return known[1]

    def read(self, out: Any) -> Any:
        if self._chan is None:
            raise SourceError(f"{self.spec.uri}: not open")
        if not isinstance(out, DeviceImage) or out.fmt != "NV12":
            raise SourceError(f"{self.spec.uri}: NVDEC frames go into device NV12 slots only")
        try:
            self._chan.send(_FILL_HEADER + self._handle(out) + FILL.pack(out.pitch, out.width, out.height))
        except ChannelClosed:
            code = self._reap()
            raise SourceError(f"{self.spec.uri}: the NVDEC worker exited (code {code})") from None
        reply = self._receive(READ_TIMEOUT_S, "decode a frame")
        if reply[:1] == b"E":
            return None
        if reply[:1] != b"D":
            self.close()
            raise SourceError(f"{self.spec.uri}: the NVDEC worker answered {reply[:16]!r} to a read")
        out.matrix = self.matrix
        self.copies += 1
        return out

    def close(self) -> None:
        if self._chan is not None:
            with contextlib.suppress(ChannelClosed):
                self._chan.send(b"Q")
        self._reap()
        self._handles.clear()
