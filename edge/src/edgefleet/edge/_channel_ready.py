"""Waiting for the agent's gRPC channel to the controller: ready, stopped, or a reason worth telling
(a refused port, a name that does not resolve) as soon as gRPC's own retries hide it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

import grpc

from edgefleet.sdk.kit import can_probe, connect_problem

__all__ = ["probe_connect", "ready_or_stopped", "until_ready"]

_log = logging.getLogger(__name__)


async def ready_or_stopped(channel: Any, stop: asyncio.Event, timeout_s: float, address: str) -> bool:
    """True once the channel is ready; False when ``stop`` is set first. Raises ConnectionError, saying
    why, as soon as the channel fails and the address refuses connections or does not resolve; otherwise
    TimeoutError after ``timeout_s``."""
    ready = asyncio.ensure_future(until_ready(channel, timeout_s, address))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({ready, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in (ready, stopped):
            f.cancel()
    if stopped in done:
        if ready.done() and not ready.cancelled():
            ready.exception()  # retrieved: stopping wins
        return False
    ready.result()  # raises ConnectionError / TimeoutError
    return True


async def until_ready(channel: Any, timeout_s: float, address: str) -> None:
    """Wait for the channel to become ready. gRPC only says "unavailable" (it keeps retrying inside the
    channel), so the first time the channel fails, a direct connection attempt tells a refused port or an
    unresolvable name, which are worth reporting at once, from trouble above TCP (TLS), which is not."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    state = channel.get_state(try_to_connect=True)
    probed: str | None = None  # "" once a probe found nothing wrong below gRPC
    while state is not grpc.ChannelConnectivity.READY:
        if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE and probed is None:
            probed = await probe_connect(address, deadline - loop.time())
            if probed:
                raise ConnectionError(probed)
        change = asyncio.ensure_future(channel.wait_for_state_change(state))
        try:
            done, _ = await asyncio.wait({change}, timeout=max(0.0, deadline - loop.time()))
        finally:
            change.cancel()
        if not done:
            break
        state = channel.get_state(try_to_connect=True)
    else:
        return
    if probed is None:  # still connecting at the deadline: a silent host, or a slow handshake
        probed = await probe_connect(address, 2.0)
        if probed:
            raise ConnectionError(probed)
    if can_probe(address):
        raise TimeoutError(
            f"no answer within {timeout_s:g} s: the address takes connections but no gRPC session came up "
            "(TLS settings, or not an edgefleet controller there?)"
        )
    raise TimeoutError(f"no answer within {timeout_s:g} s")


async def probe_connect(address: str, budget_s: float) -> str:
    """sdk ``connect_problem`` off the event loop, bounded (a name lookup has no timeout of its own);
    "" when nothing is wrong below gRPC or nothing could be learnt in time. It runs on a daemon thread of
    its own, not the loop's executor: ``asyncio.run`` joins that executor at exit, so a hung lookup would
    hold up the agent's shutdown."""
    timeout = min(2.0, max(0.5, budget_s))
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str | None] = loop.create_future()

    def settle(value: str | None) -> None:
        if not answer.done():
            answer.set_result(value)

    def probe() -> None:
        try:
            value = connect_problem(address, timeout)
        except Exception:  # a probe that breaks only loses the better message
            _log.debug("connect probe failed", exc_info=True)
            value = None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, value)

    threading.Thread(target=probe, name="connect-probe", daemon=True).start()
    try:
        return await asyncio.wait_for(answer, timeout + 1.0) or ""
    except asyncio.TimeoutError:  # not the builtin on Python 3.10
        return ""
