"""What every controller-facing command group shares: the ``--controller`` and ``--json`` options, the
one-line user error, and the fleet client built from the CLI's TLS/token settings."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Annotated, Any

import typer

ControllerOpt = Annotated[
    str | None,
    typer.Option("--controller", "-c", help="Controller host:port (default $EDGEFLEET_CONTROLLER or 127.0.0.1:50051)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout, for scripts")]


def fail(message: str, code: int = 1) -> typer.Exit:
    from edgefleet.sdk.kit import fail as kit_fail

    return kit_fail(message, code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn expected failures into one line on stderr and a non-zero exit (no traceback)."""
    from edgefleet.sdk import EdgefleetError  # the root of CloudError and of the SDK's errors

    try:
        yield
    except EdgefleetError as exc:
        raise fail(str(exc)) from None


def address(controller: str | None) -> str:
    from .._fleet_client import DEFAULT_CONTROLLER

    return controller or os.environ.get("EDGEFLEET_CONTROLLER") or DEFAULT_CONTROLLER


def client(controller: str | None) -> Any:
    from .._fleet_client import FleetClient
    from ._security_commands import client_credentials

    return FleetClient(address(controller), **client_credentials())
