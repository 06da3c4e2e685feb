"""The edgefleet controller (gRPC, asyncio) and the fleet client the CLI is built on.

Run a controller::

    from edgefleet.cloud import ControllerSettings, serve

    serve(ControllerSettings(db_url="sqlite:///state/controller.db", listen="127.0.0.1:50051"))

Talk to one::

    from edgefleet.cloud import FleetClient

    with FleetClient("127.0.0.1:50051") as fleet:
        for device in fleet.list_devices({"site": "plant-a"}):
            print(device.device_id, device.online)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgefleet.sdk.kit import distribution_version, lazy_getattr

from ._errors import (
    CloudError,
    ConflictError,
    ControllerUnavailableError,
    DatabaseError,
    InvalidArgumentError,
    NotFoundError,
    RegistryError,
    SettingsError,
)

if TYPE_CHECKING:
    from ._fleet_client import DEFAULT_CONTROLLER, FleetClient
    from ._pack import pack_package
    from ._server import Controller, serve
    from ._settings import ControllerSettings

# Imported on first use, so that `edgefleet --help` does not load gRPC or SQLAlchemy.
_LAZY = {
    "DEFAULT_CONTROLLER": "._fleet_client",
    "FleetClient": "._fleet_client",
    "pack_package": "._pack",
    "Controller": "._server",
    "serve": "._server",
    "ControllerSettings": "._settings",
}


__getattr__ = lazy_getattr(__name__, _LAZY)

__version__ = distribution_version("edgefleet-cloud")


__all__ = [
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
