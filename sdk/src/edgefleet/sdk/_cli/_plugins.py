"""``edgefleet plugins``: what each kind's registry holds in this installation."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from .._registry import KINDS, registry

__all__ = ["plugins_command"]


def plugins_command(*, as_json: bool) -> None:
    rows: list[dict[str, Any]] = []
    for kind in KINDS:
        reg = registry(kind)
        rows += [{"kind": kind, "type": e.key, "from": e.origin, "extra": e.extra} for e in reg.entries()]
        rows += [{"kind": kind, "type": k, "unavailable": why} for k, why in sorted(reg.unavailable().items())]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title="edgefleet plugins (entries of every kind)")
    for column in ("kind", "type", "from", "extra"):
        table.add_column(column)
    for row in rows:
        if "unavailable" in row:
            table.add_row(row["kind"], row["type"], f"[yellow]unavailable: {row['unavailable']}[/]", "")
        else:
            table.add_row(row["kind"], row["type"], row["from"], row["extra"] or "")
    Console().print(table)
