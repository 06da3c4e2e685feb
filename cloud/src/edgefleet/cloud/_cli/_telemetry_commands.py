"""``edgefleet telemetry tail|show``: live messages from the broker, summaries from the database."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["parse_duration", "register"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``1h``, ``7d`` (a bare number is seconds)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if m is None:
        raise typer.BadParameter(f"{text!r} is not a duration like 90s, 15m, 1h or 7d")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2) or "s"])


def _fail(message: str) -> typer.Exit:
    """One line on stderr, exit status 1, no traceback."""
    from edgefleet.sdk.kit import fail

    return fail(message, 1)


def register(cli: Any) -> None:
    grp: typer.Typer = cli.group("telemetry", "Device telemetry: live from the broker, summaries from the database.")

    @grp.command("tail")
    def tail_cmd(
        device: Annotated[str, typer.Argument(help="device id")],
        broker: Annotated[str, typer.Option(help="mqtt://host:1883 or mqtts://user:pass@host:8883")] = (
            "mqtt://127.0.0.1:1883"
        ),
        fleet: Annotated[str, typer.Option(help="fleet id (+: any)")] = "+",
        kind: Annotated[str, typer.Option(help="status, telemetry, events or + for all")] = "+",
        json_out: Annotated[bool, typer.Option("--json", help="print each payload as JSON lines")] = False,
        count: Annotated[int | None, typer.Option(min=1, help="stop after this many messages")] = None,
        timeout: Annotated[float | None, typer.Option(min=0.0, help="stop after this many seconds")] = None,
        ca_file: Annotated[Path | None, typer.Option(help="CA bundle (mqtts)")] = None,
        cert_file: Annotated[Path | None, typer.Option(help="client certificate (mqtts)")] = None,
        key_file: Annotated[Path | None, typer.Option(help="client key (mqtts)")] = None,
    ) -> None:
        """Stream a device's status, telemetry and events live."""
        from edgefleet.sdk import EdgefleetError
        from edgefleet.sdk.kit import TOPIC_KINDS

        from .._telemetry._mqtt_connection import parse_broker_url
        from .._telemetry._render import print_live

        if kind != "+" and kind not in TOPIC_KINDS:
            raise _fail(f"--kind must be {', '.join(TOPIC_KINDS)} or +")
        try:
            address = parse_broker_url(broker, ca_file=ca_file, cert_file=cert_file, key_file=key_file)
            print_live(address, device, fleet=fleet, kind=kind, json_out=json_out, count=count, timeout=timeout)
        except EdgefleetError as exc:
            raise _fail(str(exc)) from None

    @grp.command("show")
    def show_cmd(
        device: Annotated[str, typer.Argument(help="device id")],
        since: Annotated[str, typer.Option(help="window: 90s, 15m, 1h, 7d")] = "1h",
        db: Annotated[str, typer.Option(help="controller database (sqlite:///path or postgresql://...)")] = (
            "sqlite:///edgefleet-controller/controller.db"
        ),
        json_out: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    ) -> None:
        """Summarise a device's telemetry over a window: health, models, latest figures."""
        from edgefleet.sdk import EdgefleetError

        from .._telemetry._render import print_summary

        window = parse_duration(since)
        try:
            print_summary(db, device, window, json_out=json_out)
        except EdgefleetError as exc:
            raise _fail(str(exc)) from None
