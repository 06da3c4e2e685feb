"""The status code a gRPC call is counted under on the controller's /metrics."""

from __future__ import annotations

import asyncio

import grpc

from edgefleet.cloud._controller_metrics import _code, _split


class _Context:
    def __init__(self, code: grpc.StatusCode | None) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode | None:
        return self._code


def test_calls_are_counted_by_the_code_they_ended_with() -> None:
    assert _code(_Context(None), None) == "OK"
    assert _code(_Context(grpc.StatusCode.INVALID_ARGUMENT), Exception("aborted")) == "INVALID_ARGUMENT"
    assert _code(_Context(None), asyncio.CancelledError()) == "CANCELLED"  # an agent's stream at its restart
    assert _code(_Context(None), RuntimeError("bug")) == "UNKNOWN"
    assert _split("/edgefleet.proto.v1.FleetService/ListDevices") == ("FleetService", "ListDevices")
