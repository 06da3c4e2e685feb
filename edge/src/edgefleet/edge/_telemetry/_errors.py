"""Errors raised by the telemetry publisher (the agent's tree: ``edgefleet/edge/_errors.py``).

::

    EdgefleetError (edgefleet.sdk)
    └── AgentError (edgefleet.edge)
        └── TelemetryError         telemetry cannot be configured or published
            ├── BrokerUrlError         the broker URL or its TLS files are invalid
            └── SpoolError             the disk spool cannot be opened or written
"""

from __future__ import annotations

from .._errors import AgentError

__all__ = ["BrokerUrlError", "SpoolError", "TelemetryError"]


class TelemetryError(AgentError):
    """Telemetry cannot be configured or published."""


class BrokerUrlError(TelemetryError):
    """The broker URL (``mqtt://`` / ``mqtts://``) or one of its TLS files is invalid."""


class SpoolError(TelemetryError):
    """The SQLite disk spool cannot be opened or written."""
