"""The public facades of edgefleet.cloud and edgefleet.edge: exactly these names."""

from __future__ import annotations

import edgefleet.cloud
import edgefleet.edge


def test_cloud_exports() -> None:
    assert sorted(edgefleet.cloud.__all__) == sorted(
        [
            "DEFAULT_CONTROLLER",
            "CloudError",
            "ConflictError",
            "Controller",
            "ControllerSettings",
            "ControllerUnavailableError",
            "DatabaseError",
            "FleetClient",
            "InvalidArgumentError",
            "NotFoundError",
            "RegistryError",
            "SettingsError",
            "__version__",
            "pack_package",
            "serve",
        ]
    )
    for name in edgefleet.cloud.__all__:
        assert getattr(edgefleet.cloud, name) is not None
    assert issubclass(edgefleet.cloud.RegistryError, edgefleet.cloud.CloudError)


def test_edge_exports() -> None:
    assert sorted(edgefleet.edge.__all__) == sorted(
        [
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
    )
    for name in edgefleet.edge.__all__:
        assert getattr(edgefleet.edge, name) is not None
