"""Errors of the controller's telemetry ingestion and queries.

::

    EdgefleetError (edgefleet.sdk)
    └── TelemetryIngestError     telemetry cannot be ingested or queried (bad broker URL, database error)
"""

from __future__ import annotations

from edgefleet.sdk import EdgefleetError

__all__ = ["TelemetryIngestError"]


class TelemetryIngestError(EdgefleetError):
    """Telemetry cannot be ingested or queried."""
