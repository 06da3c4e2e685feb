"""Model variants per target: a version with a portable artifact and per-target ones (Jetson Orin on
JetPack 6 with TensorRT 10, an H200 with TensorRT 10); devices reporting different capabilities get
different artifacts in one rollout (their commands name them, `rollout status` shows them, and each can
be fetched), a device no artifact matches is reported as failed with why, and the matching rules hold."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from edgefleet.cloud import Controller, ControllerSettings, FleetClient, InvalidArgumentError
from edgefleet.cloud._variants import check_target, pick_variant, variant_name
from edgefleet.proto.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from tests.support.onnx_models import yolo_package

ORIN = {"arch": "aarch64", "soc": "NVIDIA Jetson AGX Orin", "jetpack": "6.1", "tensorrt": "10.3.0"}
H200 = {"arch": "x86_64", "gpu": "NVIDIA H200", "cuda": "12.6", "tensorrt": "10.8.0"}
CPU = {"arch": "x86_64"}
ORIN_T = {"soc": "orin", "jetpack": "6", "tensorrt": "10", "precision": "fp16"}
H200_T = {"gpu": "h200", "tensorrt": "10"}


def test_matching_rules() -> None:
    variants = [
        {"variant": "orin", "sha256": "a", "target": ORIN_T},
        {"variant": "h200", "sha256": "b", "target": H200_T},
        {"variant": "trt10", "sha256": "c", "target": {"tensorrt": "10"}},
        {"variant": "", "sha256": "p", "target": {}},
    ]
    assert pick_variant(variants, ORIN)["variant"] == "orin"  # type: ignore[index]
    assert pick_variant(variants, H200)["variant"] == "h200"  # type: ignore[index]  # most keys named wins
    assert pick_variant(variants, {**H200, "gpu": "NVIDIA L4"})["variant"] == "trt10"  # type: ignore[index]
    assert pick_variant(variants, {**ORIN, "jetpack": "7.2.2", "tensorrt": "11.0"})["variant"] == ""  # type: ignore[index]
    assert pick_variant(variants[:2], CPU) is None
    assert pick_variant([{"variant": "x", "sha256": "x", "target": {"tensorrt": "1"}}], {"tensorrt": "10.3"}) is None
    assert variant_name(ORIN_T) == "socorin-jetpack6-tensorrt10-precisionfp16"
    with pytest.raises(InvalidArgumentError, match="unknown key 'sm'"):
        check_target({"sm": "87"})
    with pytest.raises(InvalidArgumentError, match="tensorrt is a version"):
        check_target({"tensorrt": "ten"})


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[str]:
    settings = ControllerSettings(
        db_url=f"sqlite:///{tmp_path}/c.db",
        listen="127.0.0.1:0",
        data_dir=tmp_path / "data",
        allow_unsigned=True,
        grace_s=0.5,
    )
    ready = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        async def main() -> None:
            c = await Controller(settings).start()
            box["c"], box["loop"] = c, asyncio.get_running_loop()
            ready.set()
            await c.wait()
            await c.close()

        asyncio.run(main())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(20)
    yield f"127.0.0.1:{box['c'].port}"
    box["loop"].call_soon_threadsafe(box["c"].stop)
    t.join(15)


def _hello(address: str, device_id: str, caps: dict[str, str]) -> None:
    """A device says who it is and what it can run (the controller stores it), then goes away."""
    with grpc.insecure_channel(address) as ch:
        stub = agent_pb2_grpc.AgentServiceStub(ch)  # type: ignore[no-untyped-call]
        hello = agent_pb2.Hello(
            device_id=device_id,
            labels={"site": "mixed"},
            capabilities=common_pb2.Capabilities(**caps),
            pipelines=[common_pb2.PipelineStatus(name="cam", model_ref="toy-yolo:1.0.0", state="running")],
        )
        call = stub.Connect(iter([agent_pb2.AgentMessage(hello=hello)]), timeout=5)
        assert next(call).WhichOneof("body") == "welcome"
        call.cancel()


def _fetch(address: str, sha: str) -> int:
    with grpc.insecure_channel(address) as ch:
        stub = agent_pb2_grpc.AgentServiceStub(ch)  # type: ignore[no-untyped-call]
        return sum(len(c.data) for c in stub.FetchArtifact(agent_pb2.FetchArtifactRequest(sha256=sha), timeout=10))


def test_devices_get_the_artifact_for_their_target(controller: str, tmp_path: Path) -> None:
    for dev, caps in (("d-orin", ORIN), ("d-h200", H200), ("d-cpu", CPU)):
        _hello(controller, dev, caps)
    with FleetClient(controller) as fleet:
        portable = fleet.push(yolo_package(tmp_path / "p", version="2.0.0")).model
        orin = fleet.push(yolo_package(tmp_path / "o", version="2.0.0", size=96), target=ORIN_T, variant="orin-jp6")
        h200 = fleet.push(yolo_package(tmp_path / "h", version="2.0.0", size=128), target=H200_T)
        assert orin.created and h200.created and orin.model.sha256 == portable.sha256  # the version's row
        listed = fleet.list_models("toy-yolo")[0]
        assert listed.portable and [v.variant for v in listed.variants] == ["orin-jp6", "gpuh200-tensorrt10"]
        sha = {v.variant: v.sha256 for v in listed.variants}

        ro = fleet.deploy("toy-yolo:2.0.0", {"site": "mixed"}, ["100%"])
        got = {m.device_id: m.variant for m in ro.devices}
        assert got == {"d-orin": "orin-jp6", "d-h200": "gpuh200-tensorrt10", "d-cpu": "portable"}
        want = {"d-orin": sha["orin-jp6"], "d-h200": sha["gpuh200-tensorrt10"], "d-cpu": portable.sha256}

        def commanded() -> dict[str, str]:
            return {d: next((x.sha256 for x in fleet.get_device(d).desired), "") for d in want}

        for _ in range(100):
            if commanded() == want:
                break
            threading.Event().wait(0.1)
        assert commanded() == want  # each device is told to fetch its own artifact
        for v in listed.variants:
            assert _fetch(controller, v.sha256) == v.size  # and the controller serves it
        fleet.control(ro.rollout_id, "abort")

        # a version with targeted artifacts only: the CPU device is reported, not skipped
        fleet.push(yolo_package(tmp_path / "o3", version="3.0.0", size=96), target=ORIN_T)
        fleet.push(yolo_package(tmp_path / "h3", version="3.0.0", size=128), target=H200_T)
        assert not fleet.list_models("toy-yolo")[1].portable
        ro3 = fleet.deploy("toy-yolo:3.0.0", {"site": "mixed"}, ["100%"], max_failure_ratio=0.5)
        members = {m.device_id: m for m in ro3.devices}
        assert members["d-cpu"].state == "failed"
        assert "no artifact of toy-yolo:3.0.0 matches it (arch x86_64)" in members["d-cpu"].message
        assert members["d-orin"].variant and members["d-h200"].variant
        # devices that match the selector later join with their own pick, or are reported the same way
        _hello(controller, "d-late-orin", ORIN)
        _hello(controller, "d-late-cpu", CPU)
        late = {m.device_id: m for m in fleet.rollout(ro3.rollout_id).devices}
        assert late["d-late-orin"].variant == members["d-orin"].variant
        assert late["d-late-cpu"].state == "failed" and "no artifact of toy-yolo:3.0.0" in late["d-late-cpu"].message
