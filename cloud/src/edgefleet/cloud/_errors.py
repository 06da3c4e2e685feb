"""The controller's exception tree.

::

    CloudError                 root of every error edgefleet.cloud raises on purpose
    ├── NotFoundError          a device, model or rollout does not exist
    ├── ConflictError          the request contradicts the current state (e.g. resume a finished rollout)
    ├── InvalidArgumentError   a request is malformed (bad selector, waves, model ref, artifact)
    ├── RegistryError          an artifact was refused at push (hash, size, signature, manifest, model)
    ├── DatabaseError          the database cannot be opened or migrated
    └── ControllerUnavailableError  (CLI) the controller cannot be reached or timed out
"""

from __future__ import annotations

__all__ = [
    "CloudError",
    "ConflictError",
    "ControllerUnavailableError",
    "DatabaseError",
    "InvalidArgumentError",
    "NotFoundError",
    "RegistryError",
]


class CloudError(Exception):
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
