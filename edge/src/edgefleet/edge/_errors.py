"""The agent's exception tree. Its root derives from the SDK's, so a program (and the ``edgefleet`` CLI)
catches one class, :class:`edgefleet.sdk.EdgefleetError`, for every error edgefleet raises on purpose::

    EdgefleetError (edgefleet.sdk)
    └── AgentError               root of every error edgefleet.edge raises on purpose
        ├── AgentConfigError     agent.yaml is invalid (names the file and field)
        ├── ArtifactError        the artifact is truncated, corrupt, unsigned or not trusted
        │   └── DownloadInterruptedError  the download stopped (network, restart): retried, not final
        ├── ApplyError           a model could not be applied to the running pipelines
        └── TelemetryError       telemetry cannot be configured or published (``_telemetry/_errors.py``)
            ├── BrokerUrlError       the broker URL or its TLS files are invalid
            └── SpoolError           the disk spool cannot be opened or written
"""

from __future__ import annotations

from edgefleet.sdk import EdgefleetError

__all__ = ["AgentConfigError", "AgentError", "ApplyError", "ArtifactError", "DownloadInterruptedError"]


class AgentError(EdgefleetError):
    """Root of every error edgefleet.edge raises on purpose."""


class AgentConfigError(AgentError):
    """The agent's configuration file is invalid."""


class ArtifactError(AgentError):
    """An artifact is truncated, corrupt, unsigned or signed by a key that is not trusted."""


class DownloadInterruptedError(ArtifactError):
    """The download stopped before the end; what arrived is kept and the next attempt resumes."""


class ApplyError(AgentError):
    """A model could not be applied to the running pipelines."""
