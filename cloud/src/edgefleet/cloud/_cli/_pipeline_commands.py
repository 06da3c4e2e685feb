"""``edgefleet pipelines push|ls|show|diff`` (pipeline specs on the controller) and ``edgefleet secrets
set|ls`` (camera credentials sealed, on this machine, to one device's key; the controller never sees them
in clear). Heavy imports happen inside the commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["register_pipelines"]

from ._shared import ControllerOpt, JsonOpt
from ._shared import client as _client
from ._shared import fail as _fail
from ._shared import user_errors as _user_errors


def _console() -> Any:
    from rich.console import Console

    return Console()


def register_pipelines(cli: Any) -> None:
    _spec_commands(cli.group("pipelines", "Pipeline specs: cameras, analytics and sinks as versioned desired state."))
    _secret_commands(cli.group("secrets", "Camera credentials, sealed to one device (docs/security.md)."))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(f"{path}: no such spec file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(f"{path}: cannot read: {exc}") from None


def _ref(text: str) -> tuple[str, int]:
    from .._spec_store import parse_spec_ref

    with _user_errors():
        return parse_spec_ref(text)


def _spec_commands(grp: typer.Typer) -> None:
    @grp.command("push", no_args_is_help=True)
    def push(
        spec: Annotated[Path, typer.Argument(help="The spec file (YAML)")],
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Check a pipeline spec and store it on the controller as an immutable version."""
        from edgefleet.sdk.kit import load_pipeline_spec

        from ._display import emit_json

        text = _read(spec)
        with _user_errors():
            load_pipeline_spec(text, str(spec))  # the same checks as the controller's, without a round trip
            with _client(controller) as fleet:
                resp = fleet.push_spec(text)
        if as_json:
            emit_json(resp)
            return
        s = resp.spec
        what = "pushed" if resp.created else "already there"
        print(f"{s.name}:{s.version} {what} ({s.sha256[:12]}, {len(s.pipelines)} pipeline(s), {s.streams} stream(s))")

    @grp.command("ls")
    def ls(
        name: Annotated[str, typer.Argument(help="Only this spec's versions")] = "",
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Every pipeline spec version on the controller."""
        from rich.table import Table

        from ._display import ago, emit_json

        with _user_errors(), _client(controller) as fleet:
            specs = fleet.list_specs(name)
        if as_json:
            emit_json(specs)
            return
        t = Table(title="pipeline specs")
        for col in ("spec", "version", "pipelines", "streams", "sha256", "pushed", "description"):
            t.add_column(col, overflow="fold")
        for s in specs:
            t.add_row(
                s.name,
                str(s.version),
                ", ".join(s.pipelines),
                str(s.streams),
                s.sha256[:12],
                ago(s.pushed_at),
                s.description,
            )
        _console().print(t)

    @grp.command("show", no_args_is_help=True)
    def show(
        ref: Annotated[str, typer.Argument(help="name[:version] (default: the newest version)")],
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """A spec version as YAML (secrets appear only as ${secret:<name>} references)."""
        import yaml

        from ._display import emit_json

        name, version = _ref(ref)
        with _user_errors(), _client(controller) as fleet:
            info = fleet.get_spec(name, version)
        if as_json:
            emit_json(info)
            return
        print(f"# {info.name}:{info.version} ({info.sha256[:12]})")
        print(yaml.safe_dump(json.loads(info.document), sort_keys=False), end="")

    @grp.command("diff", no_args_is_help=True)
    def diff(
        old: Annotated[str, typer.Argument(help="name:version on the controller, or a spec file")],
        new: Annotated[str, typer.Argument(help="name:version on the controller, or a spec file")],
        controller: ControllerOpt = None,
    ) -> None:
        """What a device running OLD changes to run NEW: streams, sinks and analytics added (+), removed (-),
        changed (~), and what restarts a pipeline."""
        from edgefleet.sdk.kit import diff_specs

        with _user_errors():
            a, b = _load(old, controller), _load(new, controller)
            lines = diff_specs(a, b)
        print(f"{a.ref} -> {b.ref}")
        print("\n".join(lines) if lines else "(no change)")


def _load(ref: str, controller: str | None) -> Any:
    from edgefleet.sdk.kit import load_pipeline_spec

    path = Path(ref)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        return load_pipeline_spec(_read(path), ref)
    name, version = _ref(ref)
    with _client(controller) as fleet:
        info = fleet.get_spec(name, version)
    return load_pipeline_spec(json.loads(info.document), f"{info.name}:{info.version}")


def _secret_commands(grp: typer.Typer) -> None:
    @grp.command("set", no_args_is_help=True)
    def set_(
        device: Annotated[str, typer.Option("--device", "-d", help="The device the secret is for")],
        name: Annotated[str, typer.Argument(help="The secret's name; specs write ${secret:<name>}")],
        cert: Annotated[
            Path | None,
            typer.Option(
                help="The device's certificate (default: the key it last connected with, from the controller)"
            ),
        ] = None,
        stdin: Annotated[
            bool, typer.Option("--stdin", help="Read the value from stdin (else: prompt, hidden)")
        ] = False,
        controller: ControllerOpt = None,
    ) -> None:
        """Seal a camera credential (user:password) to one device's key, here, and store only the sealed
        value on the controller. The clear value is never sent, printed or logged."""
        from edgefleet.sdk.kit import seal

        value = sys.stdin.readline().rstrip("\n") if stdin else typer.prompt(f"{name} for {device}", hide_input=True)
        if not value:
            raise _fail("the secret is empty")
        with _user_errors(), _client(controller) as fleet:
            if cert is not None:
                key = _read(cert).encode()
            else:
                key = fleet.get_device(device).sealing_key.encode()
                if not key:
                    raise _fail(
                        f"the controller has no key of {device} (it has not connected over mTLS yet): give --cert"
                    )
            info = fleet.put_secret(device, name, seal(key, device, name, value.encode()))
        print(f"secret {info.name} sealed to {info.device_id} ({info.sha256[:12]})")

    @grp.command("ls")
    def ls(
        device: Annotated[str, typer.Option("--device", "-d", help="Only this device's")] = "",
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Secrets stored on the controller, by device and name (never their values)."""
        from rich.table import Table

        from ._display import ago, emit_json

        with _user_errors(), _client(controller) as fleet:
            secrets = fleet.list_secrets(device)
        if as_json:
            emit_json(secrets)
            return
        t = Table(title="sealed secrets")
        for col in ("device", "secret", "sealed sha256", "updated"):
            t.add_column(col)
        for s in secrets:
            t.add_row(s.device_id, s.name, s.sha256[:12], ago(s.updated_at))
        _console().print(t)
