"""The edgefleet edge agent: runs SDK pipelines and follows the controller.

Run it with ``edgefleet agent --config agent.yaml``, or from Python::

    from pathlib import Path
    from edgefleet.edge import run_agent

    run_agent(Path("agent.yaml"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgefleet.sdk.kit import distribution_version, lazy_getattr

from ._errors import AgentConfigError, AgentError, ApplyError, ArtifactError

if TYPE_CHECKING:
    from ._agent import Agent
    from ._config import AgentConfig, ControllerConfig, load_agent_config
    from ._main import run_agent

# Imported on first use, so that `edgefleet --help` does not load gRPC or the SDK's pipeline stack.
_LAZY = {
    "Agent": "._agent",
    "AgentConfig": "._config",
    "ControllerConfig": "._config",
    "load_agent_config": "._config",
    "run_agent": "._main",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__version__ = distribution_version("edgefleet-edge")

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentConfigError",
    "AgentError",
    "ApplyError",
    "ArtifactError",
    "ControllerConfig",
    "__version__",
    "load_agent_config",
    "run_agent",
]
