"""The agent's side of mutual TLS: a gRPC channel to the controller authenticated by the device's
certificate (``controller.tls`` in agent.yaml), or plain text with a warning when it is absent."""

from __future__ import annotations

import logging
from typing import Any

import grpc

from ._config import ControllerConfig
from ._errors import AgentConfigError

__all__ = ["controller_channel"]

_log = logging.getLogger(__name__)
_warned: set[str] = set()  # addresses already warned about


def controller_channel(c: ControllerConfig, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
    """A channel to ``c.address``: TLS with this device's certificate when ``c.tls`` is set."""
    if c.tls is None:
        if c.address not in _warned:
            _log.warning(
                "controller.tls is not set: plain-text gRPC to %s; anyone on the path can read and "
                "forge the control plane (development only)",
                c.address,
            )
            _warned.add(c.address)
        return grpc.aio.insecure_channel(c.address, options=options)
    try:
        creds = grpc.ssl_channel_credentials(c.tls.ca.read_bytes(), c.tls.key.read_bytes(), c.tls.cert.read_bytes())
    except OSError as exc:
        raise AgentConfigError(f"controller.tls: cannot read {exc.filename}: {exc.strerror}") from None
    if c.tls.server_name:
        options = [*options, ("grpc.ssl_target_name_override", c.tls.server_name)]
    return grpc.aio.secure_channel(c.address, creds, options=options)
