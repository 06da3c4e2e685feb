"""The edgefleet edge agent: runs SDK pipelines and follows the controller.

Run it with ``edgefleet agent --config agent.yaml``, or from Python::

    from pathlib import Path
    from edgefleet.edge import run_agent

    run_agent(Path("agent.yaml"))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

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
