"""The agent's exception tree.

::

    AgentError               root of every error edgefleet.edge raises on purpose
    ├── AgentConfigError     agent.yaml is invalid (names the file and field)
    ├── ArtifactError        the artifact is truncated, corrupt, unsigned or not trusted
    │   └── DownloadInterruptedError  the download stopped (network, restart): retried, not final
    └── ApplyError           a model could not be applied to the running pipelines
"""

from __future__ import annotations

__all__ = ["AgentConfigError", "AgentError", "ApplyError", "ArtifactError", "DownloadInterruptedError"]


class AgentError(Exception):
    """Root of every error edgefleet.edge raises on purpose."""


class AgentConfigError(AgentError):
    """The agent's configuration file is invalid."""


class ArtifactError(AgentError):
    """An artifact is truncated, corrupt, unsigned or signed by a key that is not trusted."""


class DownloadInterruptedError(ArtifactError):
    """The download stopped before the end; what arrived is kept and the next attempt resumes."""


class ApplyError(AgentError):
    """A model could not be applied to the running pipelines."""
