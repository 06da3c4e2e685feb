"""``deploy --wait``, ``rollout status --watch`` and ``devices ls --watch``: live tables that poll the
controller (every ``--interval`` seconds) until the rollout ends, or until Ctrl-C.

``deploy --wait`` and ``rollout status --watch`` exit with what the rollout came to, so a script can branch
on it: 0 completed, 3 aborted (a gate failed; its wave was rolled back), 4 rolled back (by an operator),
5 still running when ``--timeout`` ran out, 130 stopped by Ctrl-C (the rollout goes on).

Ctrl-C ends a watch between two polls: the handler only raises a flag. A KeyboardInterrupt raised wherever
the main thread happens to be (inside a gRPC call, inside the live display's locks) can leave the process
unable to exit; a second Ctrl-C still raises one, for a poll that does not come back."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import typer

__all__ = ["EXIT_CODES", "TERMINAL", "watch_devices", "watch_rollout"]

TERMINAL = ("completed", "aborted", "rolled_back")
EXIT_CODES = {"completed": 0, "aborted": 3, "rolled_back": 4}
TIMEOUT_EXIT = 5
INTERRUPTED_EXIT = 130  # what a shell reports for a command ended by SIGINT
_NAP_S = 0.05  # how soon a Ctrl-C ends a wait between polls


class _CtrlC:
    """Whether Ctrl-C was pressed during :func:`_ctrl_c`; the first press sets :attr:`pressed`, the next raises."""

    def __init__(self) -> None:
        self.pressed = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        if self.pressed:
            raise KeyboardInterrupt
        self.pressed = True  # a plain flag: taking a lock in a signal handler can deadlock the thread it interrupts

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or until Ctrl-C."""
        end = time.monotonic() + seconds
        while not self.pressed and (left := end - time.monotonic()) > 0:
            time.sleep(min(_NAP_S, left))


@contextmanager
def _ctrl_c() -> Iterator[_CtrlC]:
    ctrl_c = _CtrlC()
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield ctrl_c
        return
    before = signal.signal(signal.SIGINT, ctrl_c.handle)
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, before)


def _group(items: list[Any]) -> Any:
    from rich.console import Group

    return Group(*items)


def _poll(
    fetch: Callable[[], Any],
    ro: Any,
    deadline: float | None,
    interval_s: float,
    shown: Callable[[Any], None],
    ctrl_c: _CtrlC,
) -> Any:
    while ro.state not in TERMINAL and (deadline is None or time.monotonic() < deadline):
        ctrl_c.sleep(interval_s)
        if ctrl_c.pressed:
            break
        ro = fetch()
        shown(ro)
    return ro


def watch_rollout(fetch: Callable[[], Any], *, interval_s: float, timeout_s: float, as_json: bool) -> None:
    """Poll ``fetch()`` (a Rollout) until it ends; show it live on a terminal (else its last state; with
    ``--json`` the last as JSON); raise the exit code of :data:`EXIT_CODES` (0: return)."""
    from rich.console import Console
    from rich.live import Live

    from ._display import emit_json, rollout_tables

    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    console = Console(stderr=as_json)
    live_table = not as_json and console.is_terminal
    with _ctrl_c() as ctrl_c:
        ro = fetch()
        if live_table:
            with Live(_group(rollout_tables(ro)), console=console, refresh_per_second=2) as live:
                ro = _poll(fetch, ro, deadline, interval_s, lambda r: live.update(_group(rollout_tables(r))), ctrl_c)
        else:
            ro = _poll(fetch, ro, deadline, interval_s, lambda r: None, ctrl_c)
    if as_json:
        emit_json(ro)
    elif not live_table:
        for item in rollout_tables(ro):
            console.print(item)
    errors = Console(stderr=True, highlight=False)
    if ctrl_c.pressed and ro.state not in TERMINAL:
        errors.print(f"stopped watching; rollout {ro.rollout_id} goes on: edgefleet rollout status {ro.rollout_id}")
        raise typer.Exit(INTERRUPTED_EXIT)
    if ro.state not in TERMINAL:
        errors.print(f"rollout {ro.rollout_id} still {ro.state} after {timeout_s:g} s")
        raise typer.Exit(TIMEOUT_EXIT)
    code = EXIT_CODES[ro.state]
    if code:
        errors.print(f"rollout {ro.rollout_id} {ro.state}: {ro.message}")
        raise typer.Exit(code)


def watch_devices(fetch: Callable[[], list[Any]], *, interval_s: float) -> None:
    """``devices ls --watch``: the table, refreshed until Ctrl-C (then exit 0)."""
    from rich.console import Console
    from rich.live import Live

    from ._display import devices_table

    console = Console()
    with (
        _ctrl_c() as ctrl_c,
        Live(devices_table(fetch()), console=console, refresh_per_second=2, transient=False) as live,
    ):
        while True:
            ctrl_c.sleep(interval_s)
            if ctrl_c.pressed:
                return
            live.update(devices_table(fetch()))
