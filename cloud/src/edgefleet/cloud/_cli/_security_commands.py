"""``edgefleet certs ...`` and ``edgefleet controller mosquitto-config``; the CLI's TLS/token settings.

The CLI reads its credentials here and only here: ``EDGEFLEET_TOKEN`` (admin token),
``EDGEFLEET_TLS_CA`` / ``EDGEFLEET_TLS_CERT`` / ``EDGEFLEET_TLS_KEY`` (fleet CA and an admin
certificate) and ``EDGEFLEET_TLS_SERVER_NAME`` (when the address is not a name in the controller's
certificate)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["client_credentials", "register_security"]


def client_credentials(token: str | None = None) -> dict[str, Any]:
    """Keyword arguments for FleetClient from the environment (and an explicit ``token``)."""
    env = os.environ
    out: dict[str, Any] = {"token": token or env.get("EDGEFLEET_TOKEN") or None}
    for key, var in (
        ("tls_ca", "EDGEFLEET_TLS_CA"),
        ("tls_cert", "EDGEFLEET_TLS_CERT"),
        ("tls_key", "EDGEFLEET_TLS_KEY"),
    ):
        out[key] = Path(env[var]) if env.get(var) else None
    out["server_name"] = env.get("EDGEFLEET_TLS_SERVER_NAME") or None
    return out


def register_security(cli: Any) -> None:
    _cert_commands(cli.group("certs", "The fleet CA: device, controller, admin and broker certificates; revocation."))
    _broker_commands(cli.group("controller", "Run the edgefleet controller (gRPC)."))


def _fail(message: str) -> typer.Exit:
    from edgefleet.sdk.kit import fail

    return fail(message, 1)


CaDir = Annotated[Path, typer.Option("--ca-dir", help="The CA folder (ca.pem, ca.key, index.json, crl.pem)")]


def _cert_commands(grp: typer.Typer) -> None:
    @grp.command("init-ca")
    def init_ca_cmd(
        ca_dir: CaDir = Path("fleet-ca"),
        name: Annotated[str, typer.Option(help="The CA's common name")] = "edgefleet fleet CA",
        days: Annotated[int, typer.Option(help="Validity in days")] = 3650,
        force: Annotated[bool, typer.Option(help="Replace an existing CA (every certificate dies)")] = False,
    ) -> None:
        """Create the fleet CA: ca.pem (distribute), ca.key (mode 0600, keep offline), crl.pem."""
        from .._certs import CertError, init_ca

        try:
            path = init_ca(ca_dir, name=name, days=days, force=force)
        except CertError as exc:
            raise _fail(str(exc)) from None
        print(f"CA certificate {path}\nCA key         {ca_dir / 'ca.key'} (mode 0600; keep it offline)")

    @grp.command("issue")
    def issue_cmd(
        device: Annotated[str | None, typer.Option(help="Device id (the agent's device_id)")] = None,
        controller: Annotated[str | None, typer.Option(help="Controller host name or IP")] = None,
        admin: Annotated[str | None, typer.Option(help="Admin name")] = None,
        broker: Annotated[str | None, typer.Option(help="MQTT broker host name or IP (its server certificate)")] = None,
        san: Annotated[
            list[str] | None, typer.Option("--san", help="Extra DNS name or IP (controller, broker); repeat")
        ] = None,
        ca_dir: CaDir = Path("fleet-ca"),
        out_dir: Annotated[Path, typer.Option(help="Where to write NAME.pem and NAME.key")] = Path("."),
        days: Annotated[int, typer.Option(help="Validity in days (capped at the CA's)")] = 365,
        force: Annotated[bool, typer.Option(help="Overwrite existing files")] = False,
    ) -> None:
        """Issue one certificate: exactly one of --device, --controller, --admin, --broker."""
        from .._certs import CertError, Role, issue

        options: tuple[tuple[Role, str | None], ...] = (
            ("device", device),
            ("controller", controller),
            ("admin", admin),
            ("broker", broker),
        )
        chosen = [(r, n) for r, n in options if n]
        if len(chosen) != 1:
            raise _fail("give exactly one of --device, --controller, --admin, --broker")
        role, name = chosen[0]
        try:
            res = issue(ca_dir, role, name, out_dir, days=days, hosts=san or [], force=force)
        except CertError as exc:
            raise _fail(str(exc)) from None
        print(
            f"{role} {name}: serial {res.serial:x}, expires {res.not_after:%Y-%m-%d}\n"
            f"certificate {res.cert}\nkey         {res.key} (mode 0600)"
        )

    @grp.command("revoke", no_args_is_help=True)
    def revoke_cmd(
        serial: Annotated[str, typer.Argument(help="Serial number in hex, as `issue` printed it")],
        ca_dir: CaDir = Path("fleet-ca"),
    ) -> None:
        """Revoke a certificate and rewrite crl.pem (copy it to controllers and brokers)."""
        from .._certs import CertError, list_issued, revoke

        try:
            before = {e["serial"]: e["revoked_at"] for e in list_issued(ca_dir)}
            entry = revoke(ca_dir, serial)
        except CertError as exc:
            raise _fail(str(exc)) from None
        what = f"{entry['role']} {entry['name']} (serial {entry['serial']})"
        if before.get(entry["serial"]):
            print(f"{what} was already revoked on {entry['revoked_at'][:19]}; CRL {ca_dir / 'crl.pem'} re-signed")
        else:
            print(f"revoked {what}; CRL {ca_dir / 'crl.pem'}")

    @grp.command("ls")
    def ls_cmd(ca_dir: CaDir = Path("fleet-ca")) -> None:
        """Every certificate this CA issued."""
        from rich.console import Console
        from rich.table import Table

        from .._certs import CertError, list_issued

        try:
            entries = list_issued(ca_dir)
        except CertError as exc:
            raise _fail(str(exc)) from None
        t = Table(title=f"certificates of {ca_dir}")
        for col in ("serial", "role", "name", "expires", "revoked"):
            t.add_column(col)
        for e in entries:
            t.add_row(e["serial"], e["role"], e["name"], e["not_after"][:10], (e["revoked_at"] or "")[:19])
        Console().print(t)


def _broker_commands(grp: typer.Typer) -> None:
    @grp.command("mosquitto-config")
    def mosquitto_config_cmd(
        ca: Annotated[Path, typer.Option(help="Fleet CA certificate (clients must chain to it)")],
        cert: Annotated[Path, typer.Option(help="The broker's server certificate")],
        key: Annotated[Path, typer.Option(help="The broker's private key")],
        out: Annotated[Path, typer.Option("--out", help="Folder for mosquitto.conf and acl")],
        fleet: Annotated[str, typer.Option(help="Fleet name in the topic tree")] = "default",
        port: Annotated[int, typer.Option(help="TLS listener port")] = 8883,
        bind: Annotated[str, typer.Option(help="Address to listen on")] = "0.0.0.0",  # noqa: S104
        crl: Annotated[Path | None, typer.Option(help="Revocation list (crl.pem) to enforce")] = None,
        controller_name: Annotated[
            list[str] | None,
            typer.Option(
                "--controller-name", help="Name of a controller certificate (certs issue --controller); repeat"
            ),
        ] = None,
        admin_name: Annotated[
            list[str] | None,
            typer.Option("--admin-name", help="Name of an admin certificate that may read telemetry; repeat"),
        ] = None,
        user: Annotated[
            str | None,
            typer.Option(help="Account Mosquitto runs as (default: mosquitto when run by root, else you)"),
        ] = None,
    ) -> None:
        """Render a Mosquitto config: TLS listener, client certificates required (the common name is the
        username), an ACL exact per role, and the TLS files copied where Mosquitto's account reads them."""
        from .._mosquitto import render_mosquitto

        try:
            conf = render_mosquitto(
                out,
                ca=ca,
                cert=cert,
                key=key,
                fleet=fleet,
                port=port,
                bind=bind,
                crl=crl,
                controllers=controller_name or [],
                admins=admin_name or [],
                user=user,
            )
        except (ValueError, OSError) as exc:
            raise _fail(str(exc)) from None
        print(f"wrote {conf}, {out / 'acl'} and the TLS files beside them; run: mosquitto -c {conf}")


def controller_security(
    tls_cert: Path | None,
    tls_key: Path | None,
    client_ca: Path | None,
    crl: Path | None,
    insecure: bool,
    admin_token_file: Path | None,
    revoked_keys: list[str],
) -> dict[str, Any]:
    """ControllerSettings fields from ``controller serve`` flags; raises typer.Exit on a bad mix."""
    import logging

    from .._auth import TLSFiles

    given = [p for p in (tls_cert, tls_key, client_ca) if p is not None]
    tls: TLSFiles | None = None
    if given and insecure:
        raise _fail("--insecure contradicts --tls-cert/--tls-key/--client-ca")
    if given:
        if tls_cert is None or tls_key is None or client_ca is None:
            raise _fail("TLS needs all three of --tls-cert, --tls-key and --client-ca")
        for p in (tls_cert, tls_key, client_ca, *([crl] if crl else [])):
            if not p.is_file():
                raise _fail(f"{p}: no such file")
        from .._certs import check_tls_files

        try:  # gRPC would only say "Failed to bind to address" for a bad file
            check_tls_files(
                client_ca, tls_cert, tls_key, crl,
                flags=("--client-ca", "--tls-cert", "--tls-key", "--crl"), cert_from_ca=False,
            )  # fmt: skip
        except ValueError as exc:
            raise _fail(str(exc)) from None
        tls = TLSFiles(tls_cert, tls_key, client_ca, crl)
    elif crl is not None:
        raise _fail("--crl needs --tls-cert, --tls-key and --client-ca")
    elif not insecure:
        raise _fail(
            "give --tls-cert, --tls-key and --client-ca (see `edgefleet certs`), or --insecure for "
            "plain-text development use"
        )
    else:
        logging.getLogger("edgefleet.cloud").warning(
            "--insecure: plain-text gRPC; any client can claim any device id%s. Development only.",
            "" if admin_token_file else " and call FleetService",
        )
    tokens: tuple[str, ...] = ()
    if admin_token_file is not None:
        try:
            lines = admin_token_file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise _fail(f"{admin_token_file}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise _fail(f"{admin_token_file}: not a token file (not UTF-8 text)") from None
        tokens = tuple(t.strip() for t in lines if t.strip() and not t.startswith("#"))
        if not tokens:
            raise _fail(f"{admin_token_file}: no token in it")
        if any(len(t) < 16 for t in tokens):
            raise _fail(f"{admin_token_file}: tokens must be at least 16 characters")
    return {"tls": tls, "admin_tokens": tokens, "revoked_keys": frozenset(revoked_keys)}
