"""The ``edgefleet`` command. Members add sub-commands through the ``edgefleet.cli`` entry-point group."""

from ._app import fail, set_log_level

__all__ = ["fail", "set_log_level"]
