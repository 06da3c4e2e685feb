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

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    CloudError,
    ConflictError,
    ControllerUnavailableError,
    DatabaseError,
    InvalidArgumentError,
    NotFoundError,
    RegistryError,
)

if TYPE_CHECKING:
    from ._client import DEFAULT_CONTROLLER, FleetClient
    from ._pack import pack_package
    from ._server import Controller, serve
    from ._settings import ControllerSettings

# Imported on first use, so that `edgefleet --help` does not load gRPC or SQLAlchemy.
_LAZY = {
    "DEFAULT_CONTROLLER": "._client",
    "FleetClient": "._client",
    "pack_package": "._pack",
    "Controller": "._server",
    "serve": "._server",
    "ControllerSettings": "._settings",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


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
    "pack_package",
    "serve",
]
