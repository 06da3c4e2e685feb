"""Which pipeline and stream the current thread works for, for log lines (``bind`` at a thread's start).

Library code only records the fields; the long-running commands (agent, controller) install
:class:`~edgefleet.sdk._cli._logs.ContextFilter`, which puts them on every record."""

from __future__ import annotations

import threading

__all__ = ["bind", "current"]

_local = threading.local()


def bind(**fields: str) -> None:
    """Set this thread's log fields (e.g. ``pipeline="cam", stream="door"``); an empty value removes one."""
    now = dict(getattr(_local, "fields", {}))
    for k, v in fields.items():
        if v:
            now[k] = v
        else:
            now.pop(k, None)
    _local.fields = now


def current() -> dict[str, str]:
    """This thread's log fields."""
    fields: dict[str, str] = getattr(_local, "fields", {})
    return fields
