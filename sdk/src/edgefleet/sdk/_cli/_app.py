"""The root of the ``edgefleet`` command.

Each installed member contributes commands through an entry point in the ``edgefleet.cli`` group whose
value is ``register(cli: Cli) -> None``. Commands import their heavy dependencies lazily, so
``edgefleet --help`` loads neither ONNX Runtime, OpenCV nor CUDA.
"""

from __future__ import annotations

import logging
import sys
from importlib.metadata import entry_points
from typing import Annotated, Any

import typer

__all__ = ["LOG_LEVELS", "Cli", "fail", "main", "os_error_text", "set_log_level"]

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
        self.app.callback()(_root)

    def group(self, name: str, help: str) -> typer.Typer:
        """The sub-command group ``name``, created on first use (``models`` is shared by sdk and cloud)."""
        grp = self._groups.get(name)
        if grp is None:
            grp = typer.Typer(help=help, no_args_is_help=True)
            self._groups[name] = grp
            self.app.add_typer(grp, name=name)
        return grp


MEMBERS = ("edgefleet-sdk", "edgefleet-proto", "edgefleet-edge", "edgefleet-cloud")


def _print_versions(value: bool) -> None:
    if not value:
        return
    from .._version import distribution_version

    for dist in MEMBERS:
        found = distribution_version(dist)
        if found != "0+unknown":
            print(f"{dist} {found}")
    raise typer.Exit(0)


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed edgefleet distributions and exit.",
            is_eager=True,
            callback=_print_versions,
        ),
    ] = False,
) -> None:
    """edgefleet: video analytics from the edge to the cloud."""


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr and return the Exit to raise. The message is printed as is:
    no rich markup and no ``:emoji:`` codes (``deploy a:fire:b`` must not turn into a flame)."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, emoji=False).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def set_log_level(level: str) -> None:
    """``--log-level`` for the long-running commands (controller, agent); an unknown level is a user error."""
    name = level.upper()
    if name not in LOG_LEVELS:
        raise fail(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {level!r}", 1)
    logging.getLogger().setLevel(name)
    logging.getLogger("edgefleet").setLevel(name)


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
        raise SystemExit(_print_error(str(exc))) from None
    except OSError as exc:
        # A path the user gave that is a folder, a file, unwritable or unreadable; a TLS file that is not
        # PEM. One line, as for our own errors; the traceback is there at debug level for a bug report.
        _log.debug("OSError reached the command line", exc_info=True)
        raise SystemExit(_print_error(os_error_text(exc))) from None
    except UnicodeDecodeError as exc:
        _log.debug("UnicodeDecodeError reached the command line", exc_info=True)
        raise SystemExit(_print_error(f"a file given is not UTF-8 text ({exc.reason} at byte {exc.start})")) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def os_error_text(exc: OSError) -> str:
    """``path: what went wrong`` for an OSError, e.g. ``/etc/x: Permission denied``."""
    import errno
    import ssl

    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc} (a certificate or key file is not valid PEM, or they do not match)"
    what = (
        {
            errno.EEXIST: "exists, and is not a folder",
            errno.ENOTDIR: "a part of this path is a file, not a folder",
            errno.EISDIR: "is a folder, not a file",
        }.get(exc.errno or 0)
        or exc.strerror
        or str(exc)
    )
    if exc.filename is not None:
        return f"{exc.filename}: {what}"
    return what


def _print_error(message: str) -> int:
    from .._redact import redact

    print(f"error: {redact(message)}", file=sys.stderr)
    return 1
