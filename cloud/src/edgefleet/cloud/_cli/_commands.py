"""Commands edgefleet-cloud adds to ``edgefleet``: controller, keys, models push|ls, devices, deploy,
rollout. Heavy imports (grpc, SQLAlchemy) happen inside the commands, so ``edgefleet --help`` stays fast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgefleet.sdk.kit import INGEST_SHARE_GROUP

__all__ = ["register"]

from ._shared import ControllerOpt, JsonOpt
from ._shared import client as _client
from ._shared import fail as _fail
from ._shared import user_errors as _user_errors


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for part in item.split(","):
            k, sep, v = part.strip().partition("=")
            if not sep or not k:
                raise typer.BadParameter(f"expected key=value, got {part!r}", param_hint=what)
            out[k.strip()] = v.strip()
    return out


def _console() -> Any:
    from rich.console import Console

    return Console()


def _show(obj: Any, as_json: bool, render: Any) -> None:
    """``--json``: the message as JSON on stdout; otherwise ``render(obj)``'s rich renderables."""
    from ._display import emit_json

    if as_json:
        emit_json(obj)
        return
    items = render(obj)
    console = _console()
    for item in items if isinstance(items, list) else [items]:
        console.print(item)


def register(cli: Any) -> None:
    app: typer.Typer = cli.app
    _controller_commands(cli.group("controller", "Run the edgefleet controller (gRPC)."))
    _key_commands(cli.group("keys", "Publisher keys that sign model packages."))
    _model_commands(cli.group("models", "Model packages: inspect locally; push/ls with a controller."))
    _device_commands(cli.group("devices", "The fleet's devices, their labels and what they serve."))
    _rollout_commands(app, cli.group("rollout", "Watch and steer rollouts."))
    from ._pipeline_commands import register_pipelines
    from ._security_commands import register_security

    register_security(cli)
    register_pipelines(cli)


def _controller_commands(grp: typer.Typer) -> None:
    @grp.command("serve")
    def serve_cmd(
        ctx: typer.Context,
        config: Annotated[
            Path | None,
            typer.Option(
                "--config",
                help="YAML file of these settings (keys: the flags' names, _ for -); flags given here win",
            ),
        ] = None,
        db: Annotated[str, typer.Option(help="sqlite:///path or postgresql://user@host/db")] = (
            "sqlite:///edgefleet-controller/controller.db"
        ),
        listen: Annotated[str, typer.Option(help="host:port to listen on")] = "127.0.0.1:50051",
        data_dir: Annotated[Path, typer.Option(help="Artifact store (share it between replicas)")] = Path(
            "edgefleet-controller"
        ),
        trusted_key: Annotated[
            list[Path] | None, typer.Option("--trusted-key", help="Publisher public key (PEM); repeat")
        ] = None,
        allow_unsigned: Annotated[
            bool, typer.Option(help="Accept unsigned packages (development only; agents still refuse them)")
        ] = False,
        health_window: Annotated[float, typer.Option(help="Default per-device health window, seconds")] = 30.0,
        status_interval: Annotated[float, typer.Option(help="Seconds between agent status reports")] = 5.0,
        replica_id: Annotated[str, typer.Option(help="Name of this replica (default host:port)")] = "",
        tick: Annotated[float, typer.Option(hidden=True)] = 0.5,
        lease: Annotated[float, typer.Option(hidden=True)] = 10.0,
        stale: Annotated[float, typer.Option(hidden=True)] = 30.0,
        hello_timeout: Annotated[float, typer.Option(hidden=True)] = 10.0,
        max_attempts: Annotated[
            int, typer.Option(help="Commands sent to a device that does not converge before it fails (first included)")
        ] = 5,
        retry_backoff: Annotated[
            float, typer.Option(help="Seconds before the 2nd re-send to a device that does not converge; doubling")
        ] = 5.0,
        mqtt: Annotated[
            str | None,
            typer.Option(help="Ingest telemetry from this broker: mqtt://host:1883, mqtts://user:pass@host:8883"),
        ] = None,
        fleet: Annotated[str | None, typer.Option(help="Ingest only this fleet's telemetry (default: all)")] = None,
        mqtt_ca_file: Annotated[Path | None, typer.Option(help="CA of the broker's certificate (mqtts)")] = None,
        mqtt_cert_file: Annotated[Path | None, typer.Option(help="Client certificate for the broker")] = None,
        mqtt_key_file: Annotated[Path | None, typer.Option(help="Client key for the broker")] = None,
        mqtt_share_group: Annotated[
            str,
            typer.Option(help="Shared-subscription group of the ingest (the same on every replica; docs/security.md)"),
        ] = INGEST_SHARE_GROUP,
        metrics_listen: Annotated[
            str | None, typer.Option(help="Serve Prometheus /metrics on host:port (default: off)")
        ] = None,
        camera_grace: Annotated[
            float,
            typer.Option(
                help="Seconds a camera may be not streaming before its device reads degraded (and gates fail)"
            ),
        ] = 10.0,
        log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING")] = "INFO",
        log_format: Annotated[
            str, typer.Option(help="text (UTC timestamps), or json: one JSON object per line; credentials redacted")
        ] = "text",
        tls_cert: Annotated[Path | None, typer.Option(help="Controller certificate (PEM)")] = None,
        tls_key: Annotated[Path | None, typer.Option(help="Controller private key (PEM)")] = None,
        client_ca: Annotated[Path | None, typer.Option(help="Fleet CA that client certificates need")] = None,
        crl: Annotated[Path | None, typer.Option(help="Revocation list (re-read when it changes)")] = None,
        insecure: Annotated[
            bool, typer.Option(help="Plain-text gRPC, no client identities (development only)")
        ] = False,
        admin_token_file: Annotated[
            Path | None, typer.Option(help="File with admin tokens for FleetService, one a line")
        ] = None,
        revoked_key: Annotated[
            list[str] | None, typer.Option("--revoked-key", help="Publisher key id refused at push; repeat")
        ] = None,
    ) -> None:
        """Serve AgentService, FleetService and grpc.health.v1 until SIGINT/SIGTERM."""
        _serve(_options(ctx, config))


def _options(ctx: typer.Context, config: Path | None) -> dict[str, Any]:
    """The serve command's values: its flags' defaults, then the --config file's keys, then the flags the
    command line gave (they win)."""
    opts = dict(ctx.params)
    if config is not None:
        from .._controller_file import load_controller_file

        with _user_errors():
            from_file = load_controller_file(config)
        for name, value in from_file.items():
            source = ctx.get_parameter_source(name)  # click's ParameterSource (typer vendors click)
            if source is None or source.name == "DEFAULT":
                opts[name] = value
    return opts


def _serve(o: dict[str, Any]) -> None:
    from edgefleet.sdk import key_id as key_id_of
    from edgefleet.sdk import load_public_key
    from edgefleet.sdk.kit import configure_logs, set_log_level

    from .._server import serve
    from .._settings import ControllerSettings

    configure_logs(o["log_format"], service="edgefleet-controller")
    set_log_level(o["log_level"])
    if o["mqtt"] is None and (o["mqtt_ca_file"] or o["mqtt_cert_file"] or o["mqtt_key_file"]):
        raise _fail("--mqtt-ca-file/--mqtt-cert-file/--mqtt-key-file need --mqtt mqtts://broker:8883")
    with _user_errors():
        keys = {}
        for path in o["trusted_key"] or []:
            key = load_public_key(path)
            keys[key_id_of(key)] = key
        if not keys and not o["allow_unsigned"]:
            raise _fail("give at least one --trusted-key (publisher public key), or --allow-unsigned")
        from ._security_commands import controller_security

        security = controller_security(
            o["tls_cert"],
            o["tls_key"],
            o["client_ca"],
            o["crl"],
            o["insecure"],
            o["admin_token_file"],
            o["revoked_key"] or [],
        )
        settings = ControllerSettings(
            db_url=o["db"],
            listen=o["listen"],
            data_dir=o["data_dir"],
            trusted_keys=keys,
            allow_unsigned=o["allow_unsigned"],
            replica_id=o["replica_id"],
            status_interval_s=o["status_interval"],
            default_health_window_s=o["health_window"],
            tick_s=o["tick"],
            lease_s=o["lease"],
            stale_s=o["stale"],
            hello_timeout_s=o["hello_timeout"],
            max_attempts=o["max_attempts"],
            retry_backoff_s=o["retry_backoff"],
            mqtt_url=o["mqtt"],
            mqtt_fleet=o["fleet"],
            mqtt_ca_file=o["mqtt_ca_file"],
            mqtt_cert_file=o["mqtt_cert_file"],
            mqtt_key_file=o["mqtt_key_file"],
            mqtt_share_group=o["mqtt_share_group"],
            metrics_listen=o["metrics_listen"],
            camera_grace_s=o["camera_grace"],
            **security,
        )
        serve(
            settings,
            ready=lambda c: print(f"edgefleet controller listening on port {c.port}", flush=True),
        )


def _key_commands(grp: typer.Typer) -> None:
    @grp.command("generate")
    def generate(
        name: Annotated[str, typer.Option(help="File name stem")] = "publisher",
        out_dir: Annotated[Path, typer.Option(help="Where to write NAME.pem and NAME.pub.pem")] = Path("."),
        force: Annotated[bool, typer.Option(help="Overwrite existing files")] = False,
    ) -> None:
        """Create an Ed25519 publisher key pair (private key mode 0600)."""
        import re

        from edgefleet.sdk import generate_signing_key

        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
            raise _fail(f"--name {name!r} must be a file name stem: letters, digits, . _ - (no / or leading dot)")
        priv, pub = out_dir / f"{name}.pem", out_dir / f"{name}.pub.pem"
        if not force and (priv.exists() or pub.exists()):
            raise _fail(f"{priv} or {pub} exists; pass --force to overwrite")
        with _user_errors():
            kid = generate_signing_key(priv, pub)
        print(f"key id {kid}\nprivate {priv} (keep it secret)\npublic  {pub} (give it to controllers and agents)")


def _model_commands(grp: typer.Typer) -> None:
    @grp.command("push", no_args_is_help=True)
    def push(
        package: Annotated[Path, typer.Argument(help="Model package folder (or tar)")],
        key: Annotated[Path | None, typer.Option(help="Publisher private key (PEM) to sign with")] = None,
        target: Annotated[
            list[str] | None,
            typer.Option(
                help="A per-target artifact of the version: arch, gpu, soc, jetpack, tensorrt, cuda, precision "
                "(key=value; repeat or comma-separate). Without: the portable artifact"
            ),
        ] = None,
        variant: Annotated[str, typer.Option(help="The variant's name (default: made from --target)")] = "",
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Sign a model package and upload it to the controller's registry."""
        targets = _pairs(target or [], "--target")
        if variant and not targets:
            raise _fail("--variant names a per-target artifact: give its --target too")
        with _user_errors(), _client(controller) as fleet:
            res = fleet.push(package, key=key, target=targets, variant=variant)
        if as_json:
            from ._display import emit_json

            emit_json(res)
            return
        m = res.model
        what = "pushed" if res.created else "already in the registry:"
        print(f"{what} {m.name}:{m.version} sha256 {m.sha256[:12]} ({m.size} bytes, signed by {m.signed_by or '-'})")

    @grp.command("ls")
    def ls(
        name: Annotated[str, typer.Argument(help="Only this model")] = "",
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """List the model versions in the controller's registry."""
        from ._display import models_table

        with _user_errors(), _client(controller) as fleet:
            models = fleet.list_models(name)
        _show(models, as_json, models_table)


def _device_commands(grp: typer.Typer) -> None:
    @grp.command("ls")
    def ls(
        selector: Annotated[list[str] | None, typer.Option("--selector", "-l", help="key=value; repeat")] = None,
        watch: Annotated[bool, typer.Option(help="A live table, refreshed until Ctrl-C")] = False,
        interval: Annotated[float, typer.Option(min=0.2, help="With --watch: seconds between refreshes")] = 2.0,
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """List devices (optionally those matching every key=value)."""
        from ._display import devices_table

        sel = _pairs(selector or [], "--selector")
        if watch and as_json:
            raise _fail("--watch draws a live table; --json prints once: give one of them")
        with _user_errors(), _client(controller) as fleet:
            if watch:
                from ._watch import watch_devices

                watch_devices(lambda: fleet.list_devices(sel), interval_s=interval)
                return
            devices = fleet.list_devices(sel)
        _show(devices, as_json, devices_table)

    @grp.command("show", no_args_is_help=True)
    def show(device_id: str, controller: ControllerOpt = None, as_json: JsonOpt = False) -> None:
        """One device: capabilities, pipelines, health and desired state."""
        from ._display import device_detail

        with _user_errors(), _client(controller) as fleet:
            d = fleet.get_device(device_id)
        _show(d, as_json, device_detail)

    @grp.command("label", no_args_is_help=True)
    def label(
        device_id: str,
        labels: Annotated[list[str], typer.Argument(help="key=value to set, key- to remove")],
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Set or remove labels on a device (they override what the agent reports)."""
        from ._display import emit_json

        remove = [x[:-1] for x in labels if x.endswith("-") and "=" not in x]
        if "" in remove:
            raise _fail("'-' alone removes nothing: write key- to remove the label key")
        sets = _pairs([x for x in labels if not (x.endswith("-") and "=" not in x)], "LABELS")
        with _user_errors(), _client(controller) as fleet:
            d = fleet.set_labels(device_id, sets, remove)
        if as_json:
            emit_json(d)
        else:
            print(f"{d.device_id}: " + ",".join(f"{k}={v}" for k, v in sorted(d.labels.items())))


def _rollout_commands(app: typer.Typer, grp: typer.Typer) -> None:
    @app.command("deploy", no_args_is_help=True)
    def deploy(
        to: Annotated[list[str], typer.Option("--to", help="Label selector key=value; repeat or comma-separate")],
        model: Annotated[str, typer.Argument(help="Model name:version from the registry")] = "",
        pipeline: Annotated[
            str, typer.Option("--pipeline", help="Instead of a model: pipeline spec name:version (pipelines ls)")
        ] = "",
        waves: Annotated[str, typer.Option(help="Cumulative waves: counts or percentages")] = "1,10%,100%",
        health_window: Annotated[float, typer.Option(help="Seconds to watch each device after its swap")] = 0.0,
        max_failures: Annotated[
            float, typer.Option(help="Abort when a wave's failed share exceeds this (0: any failure)")
        ] = 0.0,
        min_fps: Annotated[float, typer.Option(help="Health gate: lowest acceptable fps per pipeline")] = 0.0,
        max_latency_ms: Annotated[float, typer.Option(help="Health gate: highest acceptable p95 latency")] = 0.0,
        min_shadow_f1: Annotated[
            float, typer.Option(help="Shadow gate: lowest F1 of the candidate vs the serving version (0: off)")
        ] = 0.0,
        max_class_mix_shift: Annotated[
            float, typer.Option(help="Shadow gate: highest class mix shift, 0..1 (0: off)")
        ] = 0.0,
        max_detection_rate_change: Annotated[
            float, typer.Option(help="Shadow gate: highest relative change of detections per frame (0: off)")
        ] = 0.0,
        shadow_sample_rate: Annotated[float, typer.Option(help="Shadow: fraction of frames (0: 0.1)")] = 0.0,
        shadow_min_frames: Annotated[int, typer.Option(help="Shadow: frames compared per device (0: 30)")] = 0,
        shadow_max_s: Annotated[float, typer.Option(help="Shadow: longest phase per device, s (0: 60)")] = 0.0,
        shadow_phase: Annotated[
            str, typer.Option(help="Shadow: before the cut-over, after it (a canary in the health window), or both")
        ] = "",
        cameras_may_be_down: Annotated[
            bool, typer.Option(help="Do not gate on cameras (by default every camera must be streaming)")
        ] = False,
        camera_grace: Annotated[
            float, typer.Option(help="Camera gate: seconds a camera may be down (0: the controller's --camera-grace)")
        ] = 0.0,
        wait: Annotated[
            bool,
            typer.Option(
                help="Follow the rollout live until it ends; exit 0 completed, 3 aborted, 4 rolled back, 5 timed out"
            ),
        ] = False,
        timeout: Annotated[
            float, typer.Option(min=0, help="With --wait: give up after this many seconds (0: never)")
        ] = 0.0,
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Roll a model version (or with --pipeline a pipeline spec) out to the devices matching --to, wave
        by wave, with the same gates, abort threshold and rollback for both. A shadow gate runs a model
        version in shadow on each device before its cut-over (docs/operations.md, "Model-quality gates")."""
        from ._display import rollout_tables

        if bool(model) == bool(pipeline):
            raise _fail("give a model name:version or --pipeline name:version (one of them)")
        sel = _pairs(to, "--to")
        wave_list = [w.strip() for w in waves.split(",") if w.strip()]
        with _user_errors(), _client(controller) as fleet:
            r = fleet.deploy(
                model,
                sel,
                wave_list,
                health_window_s=health_window,
                max_failure_ratio=max_failures,
                min_fps=min_fps,
                max_latency_ms=max_latency_ms,
                pipeline_ref=pipeline,
                shadow={
                    "min_shadow_f1": min_shadow_f1,
                    "max_class_mix_shift": max_class_mix_shift,
                    "max_detection_rate_change": max_detection_rate_change,
                    "shadow_sample_rate": shadow_sample_rate,
                    "shadow_min_frames": shadow_min_frames,
                    "shadow_max_s": shadow_max_s,
                    "shadow_phase": shadow_phase,
                },
                cameras_may_be_down=cameras_may_be_down,
                camera_grace_s=camera_grace,
            )
            if wait:
                from ._watch import watch_rollout

                rid = r.rollout_id
                watch_rollout(lambda: fleet.rollout(rid), interval_s=1.0, timeout_s=timeout, as_json=as_json)
                return
        _show(r, as_json, rollout_tables)

    @grp.command("status")
    def status(
        rollout_id: Annotated[str, typer.Argument(help="Rollout id (default: the latest)")] = "",
        watch: Annotated[
            bool, typer.Option(help="A live table until the rollout ends (exit codes as deploy --wait)")
        ] = False,
        interval: Annotated[float, typer.Option(min=0.2, help="With --watch: seconds between refreshes")] = 1.0,
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Show a rollout's waves and every device's state."""
        from ._display import rollout_tables

        with _user_errors(), _client(controller) as fleet:
            r = fleet.rollout(rollout_id)
            if watch:
                from ._watch import watch_rollout

                rid = r.rollout_id
                watch_rollout(lambda: fleet.rollout(rid), interval_s=interval, timeout_s=0.0, as_json=as_json)
                return
        _show(r, as_json, rollout_tables)

    @grp.command("ls")
    def ls(controller: ControllerOpt = None, as_json: JsonOpt = False) -> None:
        """The most recent rollouts."""
        from rich.table import Table

        from ._display import ago, emit_json

        with _user_errors(), _client(controller) as fleet:
            rollouts = fleet.list_rollouts()
        if as_json:
            emit_json(rollouts)
            return
        t = Table(title="rollouts")
        for col in ("rollout", "model", "state", "wave", "devices", "created", "message"):
            t.add_column(col)
        for r in rollouts:
            t.add_row(
                r.rollout_id,
                r.model_ref,
                r.state,
                f"{r.current_wave + 1}/{len(r.waves)}",
                str(len(r.devices)),
                ago(r.created_at),
                r.message,
            )
        _console().print(t)

    for action, doc in (
        ("pause", "Stop starting new devices; those mid-swap finish."),
        ("resume", "Continue a paused rollout."),
        ("abort", "Stop the rollout; devices keep what they serve now."),
        ("rollback", "Stop and return every device of the rollout to its previous version."),
    ):
        _control_command(grp, action, doc)


def _control_command(grp: typer.Typer, action: str, doc: str) -> None:
    def command(
        rollout_id: Annotated[str, typer.Argument(help="Rollout id (default: the latest)")] = "",
        controller: ControllerOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        from ._display import emit_json

        with _user_errors(), _client(controller) as fleet:
            r = fleet.control(rollout_id, action)
        if as_json:
            emit_json(r)
        else:
            print(f"rollout {r.rollout_id}: {r.state} ({r.message})")

    command.__doc__ = doc
    grp.command(action)(command)
