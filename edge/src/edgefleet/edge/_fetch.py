"""Resumable artifact download over AgentService.FetchArtifact into ``downloads/<sha>.part``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

import grpc

from edgefleet.proto.v1 import agent_pb2, agent_pb2_grpc

from ._errors import ArtifactError, DownloadInterruptedError

__all__ = ["download"]

_log = logging.getLogger(__name__)


async def download(
    stub: agent_pb2_grpc.AgentServiceStub,
    *,
    sha256: str,
    size: int,
    dest: Path,
    device_id: str,
    rate_limit_bps: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
    min_rate_bps: float = 64 * 1024,
    executor: Executor | None = None,
) -> int:
    """Fetch the bytes ``dest`` lacks (resuming from its length). Returns the offset it resumed from.
    File writes run on ``executor`` (the agent's low-priority install thread; None: asyncio's default)."""
    loop = asyncio.get_running_loop()
    start = dest.stat().st_size if dest.exists() else 0
    if size and start > size:
        dest.unlink()
        start = 0
    if size and start == size:
        return start
    remaining = max(size - start, 1)
    rate = min(x for x in (rate_limit_bps or float("inf"), min_rate_bps) if x > 0)
    timeout = 30.0 + remaining / rate * (1.0 if rate_limit_bps else 4.0)
    req = agent_pb2.FetchArtifactRequest(sha256=sha256, offset=start, device_id=device_id)
    got = start
    t0 = time.monotonic()
    try:
        with dest.open("ab") as f:
            call = stub.FetchArtifact(req, timeout=timeout)
            async for chunk in call:
                if chunk.offset != got:
                    raise ArtifactError(f"artifact stream out of order: chunk at {chunk.offset}, expected {got}")
                await loop.run_in_executor(executor, f.write, chunk.data)
                got += len(chunk.data)
                if progress is not None:
                    progress(got, size or chunk.total_size)
                if rate_limit_bps:
                    ahead = (got - start) / rate_limit_bps - (time.monotonic() - t0)
                    if ahead > 0:
                        await asyncio.sleep(ahead)
            await loop.run_in_executor(executor, f.flush)
    except OSError as exc:  # disk full, read-only state dir: what was written stays, to resume
        with contextlib.suppress(OSError):
            _truncate_to_whole(dest, got)
        raise DownloadInterruptedError(
            f"cannot write the download of {sha256[:12]}… at {got} of {size} bytes: "
            f"{exc.strerror or exc}; it resumes when space returns"
        ) from None
    except grpc.aio.AioRpcError as exc:
        raise DownloadInterruptedError(
            f"download of {sha256[:12]}… stopped at {got} of {size} bytes: {exc.code().name}: {exc.details()}"
        ) from None
    _log.info("downloaded %s: %d bytes (resumed from %d)", sha256[:12], got, start)
    return start


def _truncate_to_whole(dest: Path, good: int) -> None:
    """Drop a partly written chunk so the file holds exactly the ``good`` bytes received in order."""
    if dest.exists() and dest.stat().st_size > good:
        os.truncate(dest, good)
