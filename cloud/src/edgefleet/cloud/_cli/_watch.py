"""``deploy --wait``, ``rollout status --watch`` and ``devices ls --watch``: live tables that poll the
controller (every ``--interval`` seconds) until the rollout ends, or until Ctrl-C.

``deploy --wait`` and ``rollout status --watch`` exit with what the rollout came to, so a script can branch
on it: 0 completed, 3 aborted (a gate failed; its wave was rolled back), 4 rolled back (by an operator),
5 still running when ``--timeout`` ran out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import typer

__all__ = ["EXIT_CODES", "TERMINAL", "watch_devices", "watch_rollout"]

TERMINAL = ("completed", "aborted", "rolled_back")
EXIT_CODES = {"completed": 0, "aborted": 3, "rolled_back": 4}
TIMEOUT_EXIT = 5


def _group(items: list[Any]) -> Any:
    from rich.console import Group

    return Group(*items)


def _poll(
    fetch: Callable[[], Any], ro: Any, deadline: float | None, interval_s: float, shown: Callable[[Any], None]
) -> Any:
    while ro.state not in TERMINAL and (deadline is None or time.monotonic() < deadline):
        time.sleep(interval_s)
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
    ro = fetch()
    if not as_json and console.is_terminal:
        with Live(_group(rollout_tables(ro)), console=console, refresh_per_second=2) as live:
            ro = _poll(fetch, ro, deadline, interval_s, lambda r: live.update(_group(rollout_tables(r))))
    else:
        ro = _poll(fetch, ro, deadline, interval_s, lambda r: None)
        if as_json:
            emit_json(ro)
        else:
            for item in rollout_tables(ro):
                console.print(item)
    errors = Console(stderr=True, highlight=False)
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
    try:
        with Live(devices_table(fetch()), console=console, refresh_per_second=2, transient=False) as live:
            while True:
                time.sleep(interval_s)
                live.update(devices_table(fetch()))
    except KeyboardInterrupt:
        return
