"""The connection probe the agent and the CLI use to say why a controller cannot be reached, over every
form of gRPC target they accept."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from edgefleet.sdk._address import can_probe, connect_problem


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("form", ["{}", "dns:{}", "dns:///{}", "ipv4:{}", "ipv4:{},127.0.0.2:1"])
def test_a_closed_port_is_connection_refused_in_every_target_form(closed_port: int, form: str) -> None:
    why = connect_problem(form.format(f"127.0.0.1:{closed_port}"), 1.0)
    assert why == f"connection refused (nothing listens on 127.0.0.1 port {closed_port})"


def test_a_listening_port_is_no_problem_and_a_bad_name_is_said() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        assert connect_problem(f"localhost:{s.getsockname()[1]}", 1.0) is None
    why = connect_problem("nonexistent.invalid:50051", 1.0) or ""
    assert why.startswith("the name 'nonexistent.invalid' does not resolve") or "cannot be resolved now" in why


def test_unix_sockets_and_targets_it_cannot_probe(tmp_path: Path) -> None:
    assert connect_problem(f"unix:{tmp_path}/none.sock", 1.0) == f"no socket at {tmp_path}/none.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "c.sock"))
        s.listen(1)
        assert connect_problem(f"unix://{tmp_path}/c.sock", 1.0) is None
    assert not can_probe("unix-abstract:edgefleet") and connect_problem("unix-abstract:edgefleet") is None
