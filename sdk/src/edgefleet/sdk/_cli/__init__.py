"""The ``edgefleet`` command. Members add sub-commands through the ``edgefleet.cli`` entry-point group."""

from ._app import fail

__all__ = ["fail"]
