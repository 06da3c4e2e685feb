"""Mutual TLS on the control plane: a real controller process with certificates from `edgefleet certs`,
on loopback; devices, admins, strangers and revoked certificates calling it."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509

from edgefleet.cloud import FleetClient
from edgefleet.proto.v1 import agent_pb2, agent_pb2_grpc, fleet_pb2, fleet_pb2_grpc
from tests.integration.test_control_plane import EDGEFLEET, Proc, free_port, wait_for

pytestmark = [pytest.mark.integration]


def certs(*args: str) -> str:
    res = subprocess.run([EDGEFLEET, "certs", *args], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca, out = d / "ca", d / "certs"
    certs("init-ca", "--ca-dir", str(ca))
    certs("issue", "--controller", "localhost", "--san", "127.0.0.1", "--ca-dir", str(ca), "--out-dir", str(out))
    for dev in ("cam-01", "cam-02", "cam-03"):
        certs("issue", "--device", dev, "--ca-dir", str(ca), "--out-dir", str(out))
    certs("issue", "--admin", "alice", "--ca-dir", str(ca), "--out-dir", str(out))
    other = d / "other-ca"  # a CA the controller does not know, with a device of the same name
    certs("init-ca", "--ca-dir", str(other))
    certs("issue", "--device", "cam-01", "--ca-dir", str(other), "--out-dir", str(d / "other"))
    return {"ca": ca, "out": out, "other": d / "other", "other_ca": other}


def test_cli_writes_private_keys_0600_with_sans_and_expiry(pki: dict[str, Path]) -> None:
    for key in (pki["ca"] / "ca.key", pki["out"] / "cam-01.key", pki["out"] / "localhost.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    cert = x509.load_pem_x509_certificate((pki["out"] / "localhost.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    dev = x509.load_pem_x509_certificate((pki["out"] / "cam-01.pem").read_bytes())
    days = (dev.not_valid_after_utc - dev.not_valid_before_utc).days
    assert 364 <= days <= 366
    res = subprocess.run(
        [EDGEFLEET, "certs", "issue", "--device", "Bad/Name", "--ca-dir", str(pki["ca"])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 1 and "must match" in res.stderr and "Traceback" not in res.stderr


class Secured:
    def __init__(self, root: Path, pki: dict[str, Path]) -> None:
        self.pki, self.root = pki, root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        out = pki["out"]
        (root / "tokens").write_text("# admin tokens\nan-admin-token-0123456789\n")
        self.proc = Proc(
            [
                EDGEFLEET, "controller", "serve", "--db", f"sqlite:///{root}/c.db", "--listen", self.address,
                "--data-dir", str(root / "data"), "--allow-unsigned", "--status-interval", "0.5",
                "--tls-cert", str(out / "localhost.pem"), "--tls-key", str(out / "localhost.key"),
                "--client-ca", str(pki["ca"] / "ca.pem"), "--crl", str(pki["ca"] / "crl.pem"),
                "--admin-token-file", str(root / "tokens"),
            ],
            root / "controller.log",
        ).start()  # fmt: skip
        self.admin = self.client("alice")
        wait_for("the TLS controller", lambda: self.admin.list_devices() is not None, 30)

    def client(self, name: str | None, *, token: str | None = None, folder: str = "out") -> FleetClient:
        d = self.pki[folder]
        return FleetClient(
            self.address,
            timeout_s=5,
            tls_ca=self.pki["ca"] / "ca.pem",
            tls_cert=d / f"{name}.pem" if name else None,
            tls_key=d / f"{name}.key" if name else None,
            token=token,
        )

    def channel(self, name: str, folder: str = "out") -> grpc.Channel:
        d = self.pki[folder]
        creds = grpc.ssl_channel_credentials(
            (self.pki["ca"] / "ca.pem").read_bytes(),
            (d / f"{name}.key").read_bytes(),
            (d / f"{name}.pem").read_bytes(),
        )
        return grpc.secure_channel(self.address, creds)

    def connect(self, cert: str, hello_as: str, folder: str = "out") -> tuple[grpc.StatusCode | None, str]:
        """Open Connect with ``cert`` and a Hello naming ``hello_as``; the first reply or the error."""
        with self.channel(cert, folder) as ch:
            stub = agent_pb2_grpc.AgentServiceStub(ch)  # type: ignore[no-untyped-call]
            hello = agent_pb2.AgentMessage(hello=agent_pb2.Hello(device_id=hello_as, agent_version="t"))
            call = stub.Connect(iter([hello]), timeout=5)
            try:
                first = next(call)
            except grpc.RpcError as exc:
                return exc.code(), exc.details() or ""
            finally:
                call.cancel()
            return None, first.WhichOneof("body") or ""

    def close(self) -> None:
        self.admin.close()
        self.proc.kill(signal.SIGTERM)


@pytest.fixture
def secured(tmp_path: Path, pki: dict[str, Path]) -> Iterator[Secured]:
    s = Secured(tmp_path, pki)
    yield s
    s.close()


def test_mtls_identities_and_policy(secured: Secured) -> None:
    s = secured
    # a device connects as itself; the controller records it under the certificate's name
    assert s.connect("cam-01", "cam-01") == (None, "welcome")
    wait_for("cam-01 registered", lambda: any(d.device_id == "cam-01" for d in s.admin.list_devices()))
    # ... and cannot act as another device
    code, details = s.connect("cam-01", "cam-02")
    assert code == grpc.StatusCode.PERMISSION_DENIED and "identifies device cam-01" in details
    assert all(d.device_id != "cam-02" for d in s.admin.list_devices())
    # a device certificate cannot call FleetService
    with s.channel("cam-01") as ch:
        stub = fleet_pb2_grpc.FleetServiceStub(ch)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as err:
            stub.ListDevices(fleet_pb2.ListDevicesRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # an admin certificate cannot pose as a device
    code, _ = s.connect("alice", "alice")
    assert code == grpc.StatusCode.PERMISSION_DENIED
    # the admin token also opens FleetService (here alongside a device certificate)
    with s.client("cam-03", token="an-admin-token-0123456789") as c:
        assert c.list_devices() is not None
    with s.client("cam-03", token="wrong-token-0123456789") as c, pytest.raises(Exception, match="refused"):
        c.list_devices()


def test_unknown_ca_plaintext_and_revoked_are_refused(secured: Secured, pki: dict[str, Path]) -> None:
    s = secured
    # a certificate from another CA (same device name) fails the handshake
    code, _ = s.connect("cam-01", "cam-01", folder="other")
    assert code == grpc.StatusCode.UNAVAILABLE
    # plain text against a TLS port
    with grpc.insecure_channel(s.address) as ch:
        stub = fleet_pb2_grpc.FleetServiceStub(ch)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as err:
            stub.ListDevices(fleet_pb2.ListDevicesRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    # TLS without a client certificate
    with s.client(None) as c, pytest.raises(Exception, match=r"reach|refused"):
        c.list_devices()
    # revoke cam-02: refused from then on, without restarting the controller
    assert s.connect("cam-02", "cam-02") == (None, "welcome")
    serial = format(x509.load_pem_x509_certificate((pki["out"] / "cam-02.pem").read_bytes()).serial_number, "x")
    certs("revoke", serial, "--ca-dir", str(pki["ca"]))
    code, details = s.connect("cam-02", "cam-02")
    assert code == grpc.StatusCode.UNAUTHENTICATED and "revoked" in details
    assert s.connect("cam-01", "cam-01") == (None, "welcome")  # others unaffected


def test_serve_demands_tls_or_insecure(tmp_path: Path) -> None:
    base = [EDGEFLEET, "controller", "serve", "--db", f"sqlite:///{tmp_path}/c.db", "--allow-unsigned"]
    res = subprocess.run(
        [*base, "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 1 and "--insecure" in res.stderr
    port = free_port()
    log = tmp_path / "insecure.log"
    p = Proc([*base, "--listen", f"127.0.0.1:{port}", "--insecure"], log).start()
    try:
        wait_for("the warning", lambda: "--insecure: plain-text gRPC" in log.read_text(), 30)
    finally:
        p.kill(signal.SIGTERM)
    assert os.path.exists(log)


def test_real_agent_over_mutual_tls_is_known_by_its_certificate(
    secured: Secured, pki: dict[str, Path], tmp_path: Path
) -> None:
    """The agent process itself (not a hand-made client) connects with its device certificate, runs a
    pipeline, and the controller lists it under the certificate's name with its labels and model."""
    import yaml

    from tests.support.onnx_models import yolo_package

    s = secured
    model = yolo_package(tmp_path / "model")
    out = tmp_path / "certs"  # its own certificates: other tests in this module revoke some
    certs("issue", "--device", "cam-07", "--ca-dir", str(pki["ca"]), "--out-dir", str(out))
    certs("issue", "--device", "cam-08", "--ca-dir", str(pki["ca"]), "--out-dir", str(out))
    config = {
        "device_id": "cam-07",
        "labels": {"site": "tls-lab"},
        "controller": {
            "address": s.address,
            "tls": {"ca": str(pki["ca"] / "ca.pem"), "cert": str(out / "cam-07.pem"), "key": str(out / "cam-07.key")},
        },
        "require_signature": False,
        "state_dir": str(tmp_path / "state"),
        "pipelines": {"main": {"model": str(model), "sources": ["synthetic:?width=160&height=120&fps=10"]}},
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(config))
    agent = Proc([EDGEFLEET, "agent", "--config", str(tmp_path / "agent.yaml")], tmp_path / "agent.log").start()
    try:
        device = wait_for(
            "the TLS agent online with its pipeline",
            lambda: next(
                (d for d in s.admin.list_devices() if d.device_id == "cam-07" and d.online and d.pipelines), None
            ),
            45,
        )
        assert device.labels["site"] == "tls-lab"
        assert device.pipelines[0].model_ref == "toy-yolo:1.0.0"
        assert "without TLS" not in agent.text() and "plain text" not in agent.text().lower()
    finally:
        agent.kill(signal.SIGTERM)
    # the same agent with another device's certificate cannot claim cam-07's identity
    config["controller"]["tls"]["cert"] = str(out / "cam-08.pem")  # type: ignore[index]
    config["controller"]["tls"]["key"] = str(out / "cam-08.key")  # type: ignore[index]
    config["state_dir"] = str(tmp_path / "state2")
    (tmp_path / "agent2.yaml").write_text(yaml.safe_dump(config))
    impostor = Proc([EDGEFLEET, "agent", "--config", str(tmp_path / "agent2.yaml")], tmp_path / "agent2.log").start()
    try:
        wait_for(
            "the impostor refused",
            lambda: "PERMISSION_DENIED" in impostor.text() or "permission" in impostor.text().lower(),
            30,
        )
    finally:
        impostor.kill(signal.SIGTERM)
