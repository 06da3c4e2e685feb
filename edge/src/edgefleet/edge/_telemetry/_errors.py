"""Errors raised by the telemetry publisher.

::

    EdgefleetError (edgefleet.sdk)
    └── TelemetryError         telemetry cannot be configured or published
        ├── BrokerUrlError         the broker URL or its TLS files are invalid
        └── SpoolError             the disk spool cannot be opened or written
"""

from __future__ import annotations

from edgefleet.sdk import EdgefleetError

__all__ = ["BrokerUrlError", "SpoolError", "TelemetryError"]


class TelemetryError(EdgefleetError):
    """Telemetry cannot be configured or published."""


class BrokerUrlError(TelemetryError):
    """The broker URL (``mqtt://`` / ``mqtts://``) or one of its TLS files is invalid."""


class SpoolError(TelemetryError):
    """The SQLite disk spool cannot be opened or written."""
