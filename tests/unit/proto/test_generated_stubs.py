"""The committed stubs under proto/src are exactly what tools/gen-proto produces from the .proto files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "proto" / "src" / "edgefleet" / "proto" / "v1"


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen-proto"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    fresh = tmp_path / "edgefleet" / "proto" / "v1"
    fresh_files = {p.name: p.read_bytes() for p in fresh.iterdir() if p.is_file()}
    committed = {p.name: p.read_bytes() for p in COMMITTED.iterdir() if p.is_file()}
    assert sorted(committed) == sorted(fresh_files), "stale or missing stubs: run tools/gen-proto"
    drifted = [name for name in fresh_files if fresh_files[name] != committed[name]]
    assert not drifted, f"stubs out of date with the .proto files: {drifted}; run tools/gen-proto"


def test_every_proto_has_stubs() -> None:
    protos = sorted(p.stem for p in (ROOT / "proto" / "edgefleet" / "proto" / "v1").glob("*.proto"))
    assert {"agent", "common", "fleet"} <= set(protos)
    for stem in protos:
        assert (COMMITTED / f"{stem}_pb2.py").is_file()
        assert (COMMITTED / f"{stem}_pb2.pyi").is_file()
        assert (COMMITTED / f"{stem}_pb2_grpc.py").is_file()


def test_stubs_import_without_warnings() -> None:
    code = (
        "import warnings; warnings.simplefilter('error');"
        "from edgefleet.proto.v1 import agent_pb2_grpc, fleet_pb2_grpc, common_pb2;"
        "assert agent_pb2_grpc.AgentServiceStub and fleet_pb2_grpc.FleetServiceStub"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
