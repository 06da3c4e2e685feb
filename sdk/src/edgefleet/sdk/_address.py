"""``host:port`` checks shared by the agent's and the CLI's controller address and the controller's listen
address (edge and cloud both build on the SDK, never on each other)."""

from __future__ import annotations

__all__ = ["GRPC_TARGET_SCHEMES", "host_port_problem"]

GRPC_TARGET_SCHEMES = ("dns:", "unix:", "ipv4:", "ipv6:")  # gRPC target names, taken as they are


def host_port_problem(address: str, *, lowest_port: int = 1, grpc_targets: bool = True) -> str | None:
    """Why ``address`` is not ``host:port`` (port ``lowest_port``..65535), or None when it is."""
    if grpc_targets and address.startswith(GRPC_TARGET_SCHEMES):
        return None
    host, _, port = address.rpartition(":")
    if not host or "/" in host or any(c.isspace() for c in address):
        return f"must be host:port, got {address!r}"
    if not port.isdigit() or not lowest_port <= int(port) <= 65535:
        return f"must be host:port with a port {lowest_port}..65535, got {address!r}"
    return None
