"""The SDK's exception tree.

Every error the SDK raises on purpose derives from :class:`EdgefleetError`, so an application can catch
one type. Foreign errors (ONNX Runtime, OpenCV, PyAV) are translated where they enter and kept as
``__cause__``::

    EdgefleetError
    ├── ConfigError            a config file or argument is invalid (names the file and field)
    ├── ModelPackageError      a model package cannot be used
    │   ├── ManifestError          manifest.yaml missing or invalid
    │   ├── IntegrityError         a file is missing, truncated or its sha256 differs
    │   ├── SignatureError         the signature is missing, malformed or does not verify
    │   ├── ModelMismatchError     the model's real inputs/outputs contradict the manifest
    │   └── QuantizationError      an INT8 version could not be made, or fell below its accuracy check
    ├── SourceError            a source URI is invalid or the source cannot be opened
    ├── BackendError           an inference backend failed to load or run
    │   └── BackendUnavailableError  the backend's library is not installed (names the extra)
    ├── DecoderError           a decoder is unknown or its parameters do not fit the outputs
    ├── SinkError              a sink cannot be opened or written
    ├── AnalyticsError         an analytics stage is unknown, misconfigured, or broke its contract
    ├── PipelineError          a stage failed while running (the stage's exception is the cause)
    └── TopicError             not an edgefleet MQTT topic, or a name that cannot be a level of one
                               (``_topics``, also a ValueError)
"""

from __future__ import annotations

__all__ = [
    "AnalyticsError",
    "BackendError",
    "BackendUnavailableError",
    "ConfigError",
    "DecoderError",
    "EdgefleetError",
    "IntegrityError",
    "ManifestError",
    "ModelMismatchError",
    "ModelPackageError",
    "PipelineError",
    "QuantizationError",
    "SignatureError",
    "SinkError",
    "SourceError",
]


class EdgefleetError(Exception):
    """Root of every error the SDK raises on purpose."""


class ConfigError(EdgefleetError):
    """A configuration file or argument is invalid."""


class ModelPackageError(EdgefleetError):
    """A model package cannot be used."""


class ManifestError(ModelPackageError):
    """manifest.yaml is missing or does not follow the schema."""


class IntegrityError(ModelPackageError):
    """A package file is missing, has the wrong size, or its sha256 does not match the manifest."""


class SignatureError(ModelPackageError):
    """The package signature is missing, malformed, from an untrusted key, or does not verify."""


class ModelMismatchError(ModelPackageError):
    """The model's real input/output tensors contradict the manifest."""


class QuantizationError(ModelPackageError):
    """An INT8 version could not be made, or fell below the accuracy it was held to (nothing is written)."""


class SourceError(EdgefleetError):
    """A source URI is invalid or the source cannot be opened."""


class BackendError(EdgefleetError):
    """An inference backend failed to load or run."""


class BackendUnavailableError(BackendError):
    """The backend's Python library is not installed."""


class DecoderError(EdgefleetError):
    """A decoder is unknown, or its parameters do not fit the model outputs."""


class SinkError(EdgefleetError):
    """A sink cannot be opened or written."""


class AnalyticsError(EdgefleetError):
    """An analytics stage is unknown, its config is invalid, or it broke its contract while running."""


class PipelineError(EdgefleetError):
    """A pipeline stage failed while running; ``__cause__`` holds the stage's exception."""

    def __init__(self, message: str, *, stage: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage
