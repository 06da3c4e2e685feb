"""The root of the ``edgefleet`` command.

Each installed member contributes commands through an entry point in the ``edgefleet.cli`` group whose
value is ``register(cli: Cli) -> None``. Commands import their heavy dependencies lazily, so
``edgefleet --help`` loads neither ONNX Runtime, OpenCV nor CUDA.
"""

from __future__ import annotations

import logging
import sys
from importlib.metadata import entry_points
from typing import Any

import typer

__all__ = ["Cli", "fail", "main"]

_log = logging.getLogger("edgefleet.cli")


class Cli:
    """The command tree under construction: the root app plus named groups shared between members."""

    def __init__(self) -> None:
        self.app = typer.Typer(
            name="edgefleet",
            help="edgefleet: video analytics from the edge to the cloud.",
            no_args_is_help=True,
            pretty_exceptions_enable=False,
            add_completion=False,
            rich_markup_mode="rich",
        )
        self._groups: dict[str, typer.Typer] = {}

    def group(self, name: str, help: str) -> typer.Typer:
        """The sub-command group ``name``, created on first use (``models`` is shared by sdk and cloud)."""
        grp = self._groups.get(name)
        if grp is None:
            grp = typer.Typer(help=help, no_args_is_help=True)
            self._groups[name] = grp
            self.app.add_typer(grp, name=name)
        return grp


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr and return the Exit to raise."""
    from rich.console import Console

    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def build() -> Cli:
    cli = Cli()
    for ep in sorted(entry_points(group="edgefleet.cli"), key=lambda e: e.name):
        try:
            register: Any = ep.load()
        except ImportError as exc:
            _log.debug("commands from %s unavailable: %s", ep.name, exc)
            continue
        register(cli)
    return cli


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``edgefleet`` console script."""
    from .._errors import EdgefleetError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cli = build()
    try:
        cli.app(args=argv, standalone_mode=True)
    except EdgefleetError as exc:
        from .._redact import redact

        raise SystemExit(_print_error(redact(str(exc)))) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def _print_error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1
