"""The controller's gRPC surface in-process (a real grpc.aio server on a loopback port): registry
pushes and refusals, errors as status codes, the health service, message size limits; and the fleet CLI's
one-line errors."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgefleet.cloud import (
    ConflictError,
    Controller,
    ControllerSettings,
    ControllerUnavailableError,
    FleetClient,
    InvalidArgumentError,
    NotFoundError,
)
from edgefleet.proto.v1 import fleet_pb2, fleet_pb2_grpc
from edgefleet.sdk import generate_signing_key, load_public_key
from tests.support.onnx_models import write_package, yolo_package

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Any]:
    kid = generate_signing_key(tmp_path / "a.pem", tmp_path / "a.pub.pem")
    generate_signing_key(tmp_path / "b.pem", tmp_path / "b.pub.pem")
    return {"id": kid, "a": tmp_path / "a.pem", "a_pub": tmp_path / "a.pub.pem", "b": tmp_path / "b.pem"}


@pytest.fixture
def controller(tmp_path: Path, keys: dict[str, Any]) -> Iterator[str]:
    settings = ControllerSettings(
        db_url=f"sqlite:///{tmp_path}/c.db",
        listen="127.0.0.1:0",
        data_dir=tmp_path / "data",
        trusted_keys={keys["id"]: load_public_key(keys["a_pub"])},
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


def test_push_list_and_refusals(controller: str, tmp_path: Path, keys: dict[str, Any]) -> None:
    pkg = yolo_package(tmp_path / "pkg", version="1.0.0")
    with FleetClient(controller) as fleet:
        res = fleet.push(pkg, key=keys["a"])
        assert res.created and res.model.signed_by == keys["id"] and res.model.task == "detection"
        assert not fleet.push(pkg, key=keys["a"]).created  # same bytes: same artifact
        with pytest.raises(InvalidArgumentError, match="not signed"):
            fleet.push(yolo_package(tmp_path / "u", version="1.0.1"))
        with pytest.raises(InvalidArgumentError, match="not trusted"):
            fleet.push(yolo_package(tmp_path / "b", version="1.0.2"), key=keys["b"])
        other = yolo_package(tmp_path / "o", version="1.0.0", labels=("cat", "dog"))
        with pytest.raises(ConflictError, match="already in the registry"):
            fleet.push(other, key=keys["a"])
        assert [(m.name, m.version) for m in fleet.list_models()] == [("toy-yolo", "1.0.0")]
        with pytest.raises(NotFoundError):
            fleet.get_device("nope")
        with pytest.raises(NotFoundError):
            fleet.deploy("toy-yolo:9.0.0", {"site": "a"}, ["100%"])
        with pytest.raises(InvalidArgumentError, match="no device matches"):
            fleet.deploy("toy-yolo:1.0.0", {"site": "a"}, ["1", "100%"])
        with pytest.raises(InvalidArgumentError, match="last wave must be 100%"):
            fleet.deploy("toy-yolo:1.0.0", {"site": "a"}, ["1", "50%"])
        # Refused before any rollout exists: a NaN window used to create one the engine failed on every tick.
        for kw, what in [
            ({"health_window_s": float("nan")}, "health window"),
            ({"health_window_s": 1e308}, "health window"),
            ({"max_latency_ms": -1.0}, "max latency"),
            ({"min_fps": float("inf")}, "min fps"),
        ]:
            with pytest.raises(InvalidArgumentError, match=what):
                fleet.deploy("toy-yolo:1.0.0", {"site": "a"}, ["100%"], **kw)


def _with_model(pkg: Path, model: bytes | None = None, **manifest: Any) -> Path:
    """``pkg`` with its model bytes and/or manifest fields replaced and every hash recomputed, as a packager
    would: the manifest and hashes verify, only the model file is wrong."""
    if model is not None:
        (pkg / "model.onnx").write_bytes(model)
    data = {**yaml.safe_load((pkg / "manifest.yaml").read_text()), **manifest}
    (pkg / "labels.txt").unlink()
    keep = ("name", "version", "task", "decoder")
    return write_package(
        pkg,
        **{k: data[k] for k in keep},
        input_spec=data["input"],
        outputs=data["outputs"],
        labels=["person", "car", "dog"],
    )


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda onnx: random.Random(7).randbytes(40), "model.onnx is not a valid ONNX model"),
        (lambda onnx: onnx[: len(onnx) * 2 // 3], "model.onnx is truncated"),
    ],
    ids=["random-bytes", "truncated"],
)
def test_push_refuses_a_model_file_that_is_not_onnx_in_one_line(
    controller: str, tmp_path: Path, keys: dict[str, Any], damage: Any, why: str
) -> None:
    """It used to be accepted; only the agent refused it, after the rollout had started."""
    pkg = yolo_package(tmp_path / "pkg", version="1.0.0")
    _with_model(pkg, damage((pkg / "model.onnx").read_bytes()))
    out = subprocess.run(
        [EDGEFLEET, "models", "push", str(pkg), "--key", str(keys["a"]), "--controller", controller],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 1 and "Traceback" not in out.stderr, out
    assert len(lines) == 1 and f"{pkg}: {why}" in lines[0], out.stderr
    with FleetClient(controller) as fleet:
        assert fleet.list_models() == []


def test_the_controller_refuses_a_model_the_client_did_not_check(
    controller: str, tmp_path: Path, keys: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller is the trust boundary: an older or hand-made client does not check the model."""
    monkeypatch.setattr("edgefleet.sdk._packaging._pack.check_model_file", lambda *a, **kw: None)
    onnx = (yolo_package(tmp_path / "good", version="1.0.0") / "model.onnx").read_bytes()
    cases = [
        (
            _with_model(yolo_package(tmp_path / "r", version="1.0.1"), random.Random(7).randbytes(40)),
            "not a valid ONNX model",
        ),
        (_with_model(yolo_package(tmp_path / "t", version="1.0.2"), onnx[:-100]), "is truncated"),
        (
            _with_model(
                yolo_package(tmp_path / "m", version="1.0.3"), input={"name": "image", "shape": [-1, 3, 64, 64]}
            ),
            "manifest input is 'image', the model's is 'images'",
        ),
    ]
    with FleetClient(controller) as fleet:
        for pkg, why in cases:
            with pytest.raises(InvalidArgumentError) as exc:
                fleet.push(pkg, key=keys["a"])
            assert str(exc.value).startswith("artifact: model.onnx") and why in str(exc.value), exc.value
        assert fleet.list_models() == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("listen", "127.0.0.1", "host:port"),
        ("listen", "127.0.0.1:99999", "port 0..65535"),
        ("status_interval_s", float("nan"), "status_interval_s must be"),
        ("lease_s", 0.0, "lease_s must be"),
        ("default_health_window_s", -5.0, "default_health_window_s must be"),
        ("revoked_keys", frozenset({"not-a-key-id!!"}), "not a publisher key id"),
    ],
)
def test_controller_settings_refuse_what_it_cannot_run_on(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    kw: dict[str, Any] = {"db_url": f"sqlite:///{tmp_path}/c.db", "listen": "127.0.0.1:0", field: value}
    with pytest.raises(InvalidArgumentError, match=message):
        ControllerSettings(**kw)


def test_a_push_whose_bytes_do_not_match_the_header_is_refused(controller: str) -> None:
    with grpc.insecure_channel(controller) as ch:
        stub = fleet_pb2_grpc.FleetServiceStub(ch)
        parts = [
            fleet_pb2.PushModelRequest(header=fleet_pb2.PushHeader(size=4, sha256="0" * 64)),
            fleet_pb2.PushModelRequest(data=b"abcd"),
        ]
        with pytest.raises(grpc.RpcError) as exc:
            stub.PushModel(iter(parts), timeout=10)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "sha256" in exc.value.details()
        too_big = [fleet_pb2.PushModelRequest(data=b"x" * (5 << 20))]
        with pytest.raises(grpc.RpcError) as exc:
            stub.PushModel(iter(too_big), timeout=10)
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # over the 4 MiB message limit


def test_health_service_reports_serving(controller: str) -> None:
    with grpc.insecure_channel(controller) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", "edgefleet.proto.v1.AgentService", "edgefleet.proto.v1.FleetService"):
            res = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert res.status == health_pb2.HealthCheckResponse.SERVING


def test_unreachable_controller_is_one_line_that_says_why(tmp_path: Path) -> None:
    """A closed port and a name that does not resolve used to read alike ("cannot reach the controller");
    the line now says which, as a user checking a wrong port or host name needs."""
    with socket_closed_port() as port:
        refused = f"cannot reach the controller at 127.0.0.1:{port}: connection refused"
        unresolved = (
            "cannot reach the controller at nonexistent.invalid:50051: the name 'nonexistent.invalid' does not resolve"
        )
        for args, address, why in (
            (["devices", "ls"], f"127.0.0.1:{port}", refused),
            (["models", "ls"], f"127.0.0.1:{port}", refused),
            (["rollout", "status"], f"127.0.0.1:{port}", refused),
            (["devices", "ls"], "nonexistent.invalid:50051", unresolved),
        ):
            out = subprocess.run(
                [EDGEFLEET, *args, "--controller", address],
                check=False,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 1, out
            assert "Traceback" not in out.stderr
            lines = [line for line in out.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and why in lines[0], out.stderr
        with pytest.raises(ControllerUnavailableError, match="connection refused"):
            FleetClient(f"127.0.0.1:{port}", timeout_s=2).list_devices()


def test_cli_against_a_controller(controller: str, tmp_path: Path, keys: dict[str, Any]) -> None:
    pkg = yolo_package(tmp_path / "pkg", version="1.0.0")
    env_args = ["--controller", controller]
    out = subprocess.run(
        [EDGEFLEET, "models", "push", str(pkg), "--key", str(keys["a"]), *env_args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "pushed toy-yolo:1.0.0" in out.stdout, out
    out = subprocess.run(
        [EDGEFLEET, "models", "ls", "--json", *env_args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert '"version": "1.0.0"' in out.stdout
    out = subprocess.run(
        [EDGEFLEET, "deploy", "toy-yolo:1.0.0", "--to", "site=x", "--waves", "1,50", *env_args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr and "100%" in out.stderr, out
    out = subprocess.run(
        [EDGEFLEET, "keys", "generate", "--out-dir", str(tmp_path / "k")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and (tmp_path / "k" / "publisher.pem").stat().st_mode & 0o077 == 0


class socket_closed_port:
    """A loopback port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None
