"""``host:port`` checks shared by the agent's and the CLI's controller address and the controller's listen
address (edge and cloud both build on the SDK, never on each other), and the probe both use to say why a
controller cannot be reached: gRPC itself only reports "unavailable" or a timeout."""

from __future__ import annotations

import socket
from typing import Any

__all__ = [
    "GRPC_TARGET_SCHEMES",
    "TcpProblem",
    "can_probe",
    "connect_problem",
    "host_port_problem",
    "tcp_failure",
    "tcp_problem",
]

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


def _host_port(address: str) -> tuple[str, int] | None:
    """The first (host, port) of a gRPC target (``host:port``, ``dns:[//authority/]host:port``,
    ``ipv4:a:p[,…]``, ``ipv6:[a]:p``), or None for one this cannot probe."""
    target = address
    if target.startswith("dns:"):
        target = target[4:]
        if target.startswith("//"):
            target = target[2:].partition("/")[2]  # drop the DNS server's authority
    elif target.startswith(("ipv4:", "ipv6:")):
        target = target[5:].split(",")[0]
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _unix_problem(path: str, timeout_s: float) -> str | None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(path)
        except FileNotFoundError:
            return f"no socket at {path}"
        except ConnectionRefusedError:
            return f"connection refused at {path} (a socket file nothing listens on)"
        except TimeoutError:
            return f"no answer from {path} within {timeout_s:g} s"
        except OSError as exc:
            return f"cannot connect to {path}: {exc.strerror or exc}"
    return None


def can_probe(address: str) -> bool:
    """Whether :func:`connect_problem` understands this gRPC target (else it answers None)."""
    return address.startswith("unix:") or _host_port(address) is not None


def connect_problem(address: str, timeout_s: float = 2.0) -> str | None:
    """Why a connection to the gRPC target ``address`` cannot be opened ("connection refused", "the name
    … does not resolve", no answer within ``timeout_s``, …), or None when it can (then the trouble is above
    TCP: TLS, or not a gRPC server) or when the target is not one this can probe. Blocks up to about
    ``timeout_s`` per resolved address, plus the name lookup: call it off an event loop.

    Example::

        why = connect_problem("127.0.0.1:50051")  # "connection refused (nothing listens on 127.0.0.1 port 50051)"
    """
    if address.startswith("unix:"):
        return _unix_problem(address[7:] if address.startswith("unix://") else address[5:], timeout_s)
    hp = _host_port(address)
    if hp is None:
        return None
    return tcp_problem(*hp, timeout_s)


TcpProblem = tuple[str, str]  # (kind: "dns", "refused", "timeout" or "unreachable"; the sentence)


def tcp_problem(host: str, port: int, timeout_s: float = 2.0) -> str | None:
    """Why a TCP connection to ``host``:``port`` cannot be opened (the name does not resolve, connection
    refused, no answer within ``timeout_s``), or None when it can. Shared by the controller probe above and
    the network cameras' "stream cannot be opened" message. Blocks: call it off an event loop."""
    failure = tcp_failure(host, port, timeout_s)
    return None if failure is None else failure[1]


def tcp_failure(host: str, port: int, timeout_s: float = 2.0) -> TcpProblem | None:
    """:func:`tcp_problem` with its kind: ``("dns" | "refused" | "timeout" | "unreachable", sentence)``."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno == socket.EAI_AGAIN:
            return "dns", f"the name {host!r} cannot be resolved now ({exc.strerror}; is DNS reachable?)"
        return "dns", f"the name {host!r} does not resolve ({exc.strerror})"
    except (OSError, UnicodeError) as exc:
        return "dns", f"the name {host!r} does not resolve ({exc})"
    return _tcp_problem(host, port, [(info[0], info[4]) for info in infos], timeout_s)


def _tcp_problem(host: str, port: int, addresses: list[tuple[int, Any]], timeout_s: float) -> TcpProblem | None:
    """None when one of ``addresses`` (family, socket address) accepts a TCP connection; otherwise the most
    telling failure: refused before no answer before anything else."""
    refused, timed_out, other = False, False, ""
    for family, sockaddr in addresses:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            try:
                s.connect(sockaddr)
            except ConnectionRefusedError:
                refused = True
            except TimeoutError:
                timed_out = True
            except OSError as exc:
                other = other or (exc.strerror or str(exc))
            else:
                return None
    if refused:
        return "refused", f"connection refused (nothing listens on {host} port {port})"
    if timed_out:
        why = f"no answer from {host} port {port} within {timeout_s:g} s (host down, or a firewall dropping packets?)"
        return "timeout", why
    return "unreachable", f"cannot connect to {host} port {port}: {other or 'no address'}"
