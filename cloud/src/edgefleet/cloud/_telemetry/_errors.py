"""Errors of the controller's telemetry ingestion and queries (the controller's tree:
``edgefleet/cloud/_errors.py``).

::

    EdgefleetError (edgefleet.sdk)
    └── CloudError (edgefleet.cloud)
        └── TelemetryIngestError     telemetry cannot be ingested or queried (bad broker URL, database error)
"""

from __future__ import annotations

from .._errors import CloudError

__all__ = ["TelemetryIngestError"]


class TelemetryIngestError(CloudError):
    """Telemetry cannot be ingested or queried."""
