"""Ctrl-C during ``devices ls --watch``, ``deploy --wait`` and ``rollout status --watch``: the watch ends at the
next poll, the poll under way runs to its end (a KeyboardInterrupt inside a gRPC call or the live display's
locks can leave the process unable to exit: a CI run saw ``devices ls --watch`` ignore SIGINT for 20 s), the
handler before is back afterwards, and a second Ctrl-C still interrupts a poll that hangs."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import typer

from edgefleet.cloud._cli._watch import INTERRUPTED_EXIT, watch_devices, watch_rollout
from edgefleet.proto.v1 import fleet_pb2


def _ctrl_c_during_call(calls: int, *, presses: int = 1) -> tuple[Callable[[], None], list[str]]:
    """A poll that, on call ``calls``, gets SIGINT ``presses`` times part-way through and then goes on."""
    log: list[str] = []

    def poll() -> None:
        log.append("start")
        if log.count("start") == calls:
            for _ in range(presses):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler runs here, in the middle of the "RPC"
            time.sleep(0.2)
        log.append("end")

    return poll, log


def test_ctrl_c_lets_the_poll_under_way_finish_and_ends_the_device_watch() -> None:
    before = signal.getsignal(signal.SIGINT)
    poll, log = _ctrl_c_during_call(2)

    def fetch() -> list[Any]:
        poll()
        return [fleet_pb2.Device(device_id="w1")]

    watch_devices(fetch, interval_s=0.05)
    assert log == ["start", "end", "start", "end"]  # no third poll; the second was not cut short
    assert signal.getsignal(signal.SIGINT) is before


def test_a_second_ctrl_c_interrupts_a_poll_that_hangs() -> None:
    before = signal.getsignal(signal.SIGINT)
    poll, log = _ctrl_c_during_call(1, presses=2)
    with pytest.raises(KeyboardInterrupt):
        watch_devices(lambda: [poll()], interval_s=0.05)
    assert log == ["start"]
    assert signal.getsignal(signal.SIGINT) is before


def _rollout(state: str) -> fleet_pb2.Rollout:
    return fleet_pb2.Rollout(rollout_id="r-1", model_ref="det:2.0.0", state=state, waves=["100%"])


def test_ctrl_c_stops_following_a_rollout_with_130_and_says_it_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    poll, log = _ctrl_c_during_call(2)

    def fetch() -> fleet_pb2.Rollout:
        poll()
        return _rollout("running")

    with pytest.raises(typer.Exit) as stopped:
        watch_rollout(fetch, interval_s=0.05, timeout_s=30, as_json=False)
    assert stopped.value.exit_code == INTERRUPTED_EXIT
    assert log == ["start", "end", "start", "end"]
    assert "stopped watching; rollout r-1 goes on: edgefleet rollout status r-1" in capsys.readouterr().err


def test_a_rollout_that_ended_during_the_interrupted_poll_exits_with_its_own_code() -> None:
    states = iter(["running", "completed"])
    poll, _ = _ctrl_c_during_call(2)

    def fetch() -> fleet_pb2.Rollout:
        poll()
        return _rollout(next(states))

    watch_rollout(fetch, interval_s=0.05, timeout_s=30, as_json=True)  # completed: returns (exit 0)
