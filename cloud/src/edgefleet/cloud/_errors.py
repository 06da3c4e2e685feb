"""The controller's exception tree. Its root derives from the SDK's, so a program (and the ``edgefleet``
CLI) catches one class, :class:`edgefleet.sdk.EdgefleetError`, for every error edgefleet raises on purpose::

    EdgefleetError (edgefleet.sdk)
    └── CloudError                 root of every error edgefleet.cloud raises on purpose
        ├── NotFoundError          a device, model or rollout does not exist
        ├── ConflictError          the request contradicts the current state (e.g. resume a finished rollout)
        ├── InvalidArgumentError   a request or a setting is malformed (bad selector, waves, model ref, artifact)
        │   ├── RegistryError          an artifact was refused at push (hash, size, signature, manifest, model)
        │   └── SettingsError          the controller's settings (flags or --config file) are invalid
        ├── DatabaseError          the database cannot be opened or migrated
        ├── ControllerUnavailableError  (CLI) the controller cannot be reached or timed out
        └── TelemetryIngestError   telemetry cannot be ingested or queried (``_telemetry/_errors.py``)
"""

from __future__ import annotations

from edgefleet.sdk import EdgefleetError

__all__ = [
    "CloudError",
    "ConflictError",
    "ControllerUnavailableError",
    "DatabaseError",
    "InvalidArgumentError",
    "NotFoundError",
    "RegistryError",
    "SettingsError",
]


class CloudError(EdgefleetError):
    """Root of every error edgefleet.cloud raises on purpose."""


class NotFoundError(CloudError):
    """A device, model or rollout does not exist."""


class ConflictError(CloudError):
    """The request contradicts the current state."""


class InvalidArgumentError(CloudError):
    """A request is malformed."""


class RegistryError(InvalidArgumentError):
    """An artifact was refused at push: hash, size, manifest, signature, or a model file that is not a
    readable ONNX model matching its manifest."""


class DatabaseError(CloudError):
    """The database cannot be opened or migrated."""


class ControllerUnavailableError(CloudError):
    """The controller cannot be reached, or did not answer within the deadline."""


class SettingsError(InvalidArgumentError):
    """The controller's settings are invalid: a flag, or a field of the ``--config`` file (named)."""
