"""The ``edgefleet`` command. Members add sub-commands through the ``edgefleet.cli`` entry-point group."""

from ._app import fail, set_log_level
from ._logs import configure_logs, set_log_fields

__all__ = ["configure_logs", "fail", "set_log_fields", "set_log_level"]
