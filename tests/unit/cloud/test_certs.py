"""The fleet CA's edges: what a user gets wrong is refused before anything is written."""

from __future__ import annotations

import datetime as dt
import os
import pwd
import re
from pathlib import Path

import pytest

from edgefleet.cloud import _certs
from edgefleet.cloud._certs import CertError, init_ca, issue, list_issued, revoke


def test_init_ca_refuses_validity_and_names_it_cannot_sign(tmp_path: Path) -> None:
    for kw, message in [
        ({"days": 0}, "--days must be 1..36500"),
        ({"days": 99_999_999}, "--days must be 1..36500"),
        ({"name": ""}, "--name must be 1..64 characters"),
        ({"name": "x" * 65}, "--name must be 1..64 characters"),
    ]:
        with pytest.raises(CertError, match=message):
            init_ca(tmp_path / "ca", **kw)  # type: ignore[arg-type]
        assert not (tmp_path / "ca" / "ca.key").exists()


def test_a_damaged_index_refuses_issuing_and_writes_nothing(tmp_path: Path) -> None:
    ca, out = tmp_path / "ca", tmp_path / "out"
    init_ca(ca)
    for damage in (b"", b"\x87\xff", b"[1, 2]", b'{"certificates": [1]}'):
        (ca / "index.json").write_bytes(damage)
        with pytest.raises(CertError, match="index.json: damaged"):
            issue(ca, "device", "cam-1", out)
        with pytest.raises(CertError, match="index.json: damaged"):
            list_issued(ca)
        assert not out.exists() or not any(out.iterdir()), "a certificate the index does not record"


def test_a_ca_key_of_another_ca_or_an_expired_ca_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca, other = tmp_path / "ca", tmp_path / "other"
    init_ca(ca, days=1)
    init_ca(other)
    issued = issue(ca, "device", "cam-1", tmp_path / "out")
    (ca / "ca.key").rename(tmp_path / "ca.key.offline")  # kept offline: listing still works
    assert [e["name"] for e in list_issued(ca)] == ["cam-1"]
    (ca / "ca.key").write_bytes((other / "ca.key").read_bytes())
    with pytest.raises(CertError, match="ca.key is not the key of ca.pem"):
        issue(ca, "device", "cam-2", tmp_path / "out")
    (ca / "ca.key").write_bytes((tmp_path / "ca.key.offline").read_bytes())
    later = issued.not_after + dt.timedelta(days=2)
    monkeypatch.setattr(_certs, "_now", lambda: later)
    with pytest.raises(CertError, match="the CA expired on"):
        issue(ca, "device", "cam-2", tmp_path / "out")


def test_mosquitto_config_refuses_tls_files_mosquitto_would_refuse(tmp_path: Path) -> None:
    """They used to be written into mosquitto.conf as given; the broker failed later, or at a client."""
    from edgefleet.cloud._mosquitto import render_mosquitto

    ca, other = tmp_path / "ca", tmp_path / "other"
    init_ca(ca)
    init_ca(other)
    server = issue(ca, "broker", "localhost", tmp_path / "out")
    ctl = issue(ca, "controller", "ctl", tmp_path / "out")
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"\x87 not PEM")
    me = pwd.getpwuid(os.geteuid()).pw_name  # Mosquitto run as this account: it reads what it wrote
    good = {"ca": ca / "ca.pem", "cert": server.cert, "key": server.key, "crl": ca / "crl.pem", "user": me}
    assert render_mosquitto(tmp_path / "conf", **good).is_file()  # type: ignore[arg-type]
    for change, message in [
        ({"ca": junk}, "--ca .*: not a PEM certificate"),
        ({"ca": ca / "ca.key"}, "--ca .*: not a PEM certificate"),
        ({"ca": server.cert}, "not a CA certificate"),
        ({"key": ca / "ca.key"}, "is not the private key of --cert"),
        ({"ca": other / "ca.pem"}, "was not issued by --ca"),
        ({"crl": other / "crl.pem"}, "--crl .* is not signed by --ca"),
        ({"bind": "not an addr"}, "neither an IP address nor a host name"),
        ({"cert": ctl.cert, "key": ctl.key}, "is a controller certificate .*certs issue --broker"),
        ({"user": "no-such-account-here"}, "no such account"),
    ]:
        with pytest.raises(ValueError, match=message):
            render_mosquitto(tmp_path / "bad", **{**good, **change})  # type: ignore[arg-type]
        assert not (tmp_path / "bad").exists(), "files written for a refused config"


def test_controller_tls_files_are_checked_before_grpc_sees_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gRPC answered a bad file with 'cannot listen on ...: Failed to bind to address'."""
    import typer

    from edgefleet.cloud._cli._security_commands import controller_security

    init_ca(tmp_path / "ca")
    server = issue(tmp_path / "ca", "controller", "localhost", tmp_path / "out")
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"not PEM")
    ca = tmp_path / "ca" / "ca.pem"
    assert controller_security(server.cert, server.key, ca, None, False, None, [])["tls"] is not None
    for cert, key, message in [
        (junk, server.key, "--tls-cert .*junk.pem: not a PEM certificate"),
        (server.cert, tmp_path / "ca" / "ca.key", "--tls-key .* is not the private key of --tls-cert"),
    ]:
        with pytest.raises(typer.Exit):
            controller_security(cert, key, ca, None, False, None, [])
        assert re.search(message, capsys.readouterr().err.replace("\n", ""))


def test_roles_are_in_the_common_name_and_names_are_unique_across_roles(tmp_path: Path) -> None:
    from edgefleet.sdk._tls import certificate_role

    ca = tmp_path / "ca"
    init_ca(ca)
    got = {
        role: certificate_role(issue(ca, role, name, tmp_path / "out").cert.read_bytes())  # type: ignore[arg-type]
        for role, name in (("device", "cam-1"), ("controller", "ctl"), ("admin", "alice"), ("broker", "mqtt"))
    }
    assert {r: (c.role, c.name, c.cn) for r, c in got.items()} == {
        "device": ("device", "cam-1", "cam-1"),
        "controller": ("controller", "ctl", "controller/ctl"),
        "admin": ("admin", "alice", "admin/alice"),
        "broker": ("broker", "mqtt", "broker/mqtt"),
    }
    for role, name in (("device", "ctl"), ("admin", "cam-1"), ("broker", "alice"), ("controller", "mqtt")):
        with pytest.raises(CertError, match=f"'{name}' is already the name of a"):
            issue(ca, role, name, tmp_path / "refused")  # type: ignore[arg-type]
    assert not (tmp_path / "refused").exists()
    issue(ca, "device", "cam-1", tmp_path / "out", force=True)  # the same role again: a renewal
    serial = next(e["serial"] for e in list_issued(ca) if e["name"] == "ctl")
    revoke(ca, serial)
    issue(ca, "device", "ctl", tmp_path / "out2")  # a revoked name may go to another role
