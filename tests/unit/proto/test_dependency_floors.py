"""The dependency floors match what the code needs: proto's (and edge's and cloud's) protobuf and grpcio
floors are the versions the committed stubs check for at import (a lower one installs, then fails at the
first import with a version error); edge and cloud pin the SDK and proto release they were built with;
constraints.txt satisfies every floor."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[3]
STUBS = ROOT / "proto" / "src" / "edgefleet" / "proto" / "v1"
_PB_CHECK = re.compile(
    r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),"
)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def _requirements(member: str) -> dict[str, str]:
    """``{distribution (lower case): specifier}`` of a member's dependencies."""
    data = tomllib.loads((ROOT / member / "pyproject.toml").read_text(encoding="utf-8"))
    out = {}
    for req in data["project"]["dependencies"]:
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", req)
        assert m, req
        out[m.group(1).lower()] = m.group(3).strip()
    return out


def _stub_needs() -> dict[str, tuple[int, ...]]:
    """The newest protobuf and grpcio the generated stubs check for."""
    pb = []
    for path in STUBS.glob("*_pb2.py"):
        m = re.search(
            r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),",
            path.read_text(),
        )
        assert m, path
        pb.append(tuple(int(x) for x in m.groups()))
    grpc = []
    for path in STUBS.glob("*_pb2_grpc.py"):
        m = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", path.read_text())
        assert m, path
        grpc.append(_version(m.group(1)))
    assert pb and grpc
    return {"protobuf": max(pb), "grpcio": max(grpc)}


def _floor(spec: str) -> tuple[int, ...]:
    m = re.fullmatch(r">=\s*([\d.]+)", spec)
    assert m, f"expected a >= floor, got {spec!r}"
    return _version(m.group(1))


@pytest.mark.parametrize("member", ["proto", "edge", "cloud"])
def test_protobuf_and_grpcio_floors_are_what_the_stubs_check_for(member: str) -> None:
    reqs = _requirements(member)
    for dist, needed in _stub_needs().items():
        assert _floor(reqs[dist]) == needed, f"{member}: {dist}{reqs[dist]}, the stubs need {needed}"


@pytest.mark.parametrize("member", ["edge", "cloud"])
def test_edge_and_cloud_pin_the_sdk_and_proto_they_were_built_with(member: str) -> None:
    reqs = _requirements(member)
    for dist in ("edgefleet-sdk", "edgefleet-proto"):
        built = tomllib.loads((ROOT / dist.split("-")[1] / "pyproject.toml").read_text())["project"]["version"]
        assert reqs[dist] == f"=={built}", f"{member} depends on {dist}{reqs[dist]}, built with {built}"


def test_the_constraints_satisfy_the_floors() -> None:
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([\d.]+)", (ROOT / "constraints.txt").read_text(), re.M))
    pins = {k.lower(): v for k, v in pins.items()}
    for dist, needed in _stub_needs().items():
        assert _version(pins[dist]) >= needed, f"constraints.txt pins {dist}=={pins[dist]}, the stubs need {needed}"


def test_the_installed_versions_are_the_ones_written_once() -> None:
    import edgefleet.cloud
    import edgefleet.edge
    import edgefleet.sdk
    from edgefleet.edge._agent import VERSION

    for member, module in (("sdk", edgefleet.sdk), ("edge", edgefleet.edge), ("cloud", edgefleet.cloud)):
        written = tomllib.loads((ROOT / member / "pyproject.toml").read_text())["project"]["version"]
        assert module.__version__ == written
    assert edgefleet.edge.__version__ == VERSION
