"""``edgefleet models init|bump|pack|verify|quantize``: making, versioning, signing and checking model
packages on the workstation (no controller needed; ``models push`` uploads what ``pack`` made)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._app import Cli, fail

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register_model_commands"]


def _imgsz(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX,]\s*(\d+)\s*)?", text)
    if not m or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < 1):
        raise fail(f"--imgsz must be HEIGHTxWIDTH or one size, got {text!r}")
    h = int(m.group(1))
    return h, int(m.group(2) or h)


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


_STYLE = {"found": "green", "guessed": "yellow", "confirm": "bold yellow"}


def register_model_commands(cli: Cli) -> None:
    models = cli.group("models", "Model packages: inspect locally; push/ls with a controller.")

    @models.command("init", no_args_is_help=True)
    def init(
        model: Annotated[Path, typer.Argument(help="A plain ONNX model (e.g. a fresh `yolo export format=onnx`)")],
        out: Annotated[Path | None, typer.Option(help="Package folder to write (default ./NAME)")] = None,
        name: Annotated[str | None, typer.Option(help="Package name (default: from the file name)")] = None,
        version: Annotated[str, typer.Option(help="Semantic version")] = "1.0.0",
        labels: Annotated[Path | None, typer.Option(help="Class names, one per line (overrides the file's)")] = None,
        imgsz: Annotated[str | None, typer.Option(help="HEIGHTxWIDTH, for a model whose input size is dynamic")] = None,
        force: Annotated[bool, typer.Option(help="Replace OUT if it exists")] = False,
        load: Annotated[bool, typer.Option(help="Load and dry-run the new package in ONNX Runtime")] = True,
    ) -> None:
        """Write a complete package (manifest with input spec, outputs, decoder, labels, sha256s) for a
        plain ONNX file, and say what was found, guessed and must be confirmed."""
        from .._packaging import init_package

        report = init_package(
            model, out, name=name, version=version, labels=labels, imgsz=_imgsz(imgsz), force=force, load=load
        )
        console = _console()
        m = report.package.manifest
        console.print(f"wrote [bold]{report.root}[/] ({m.ref}, task {m.task}, decoder {m.decoder.type})")
        for note in report.notes:
            console.print(f"  [{_STYLE.get(note.kind, 'white')}]{note.kind:8}[/] {note.text}")
        if report.problem is not None:
            raise fail(f"the package was written but does not load: {report.problem}", 1)
        if report.loaded:
            console.print("  [green]loaded and run once in ONNX Runtime: the checks `edgefleet run` makes pass[/]")
        console.print(f"next: edgefleet models pack {report.root} --key publisher.pem")

    @models.command("bump", no_args_is_help=True)
    def bump(
        package: Annotated[Path, typer.Argument(help="Model package folder")],
        major: Annotated[bool, typer.Option("--major", help="X.y.z -> (X+1).0.0")] = False,
        minor: Annotated[bool, typer.Option("--minor", help="x.Y.z -> x.(Y+1).0")] = False,
        patch: Annotated[bool, typer.Option("--patch", help="x.y.Z -> x.y.(Z+1)")] = False,
        files: Annotated[bool, typer.Option("--files", help="Only re-record the files' sha256s and sizes")] = False,
    ) -> None:
        """A new version of a package folder: bump the version and record every listed file's current
        sha256 and size (drops a signature, which covered the old manifest)."""
        from .._packaging import bump_package

        parts = [p for p, on in (("major", major), ("minor", minor), ("patch", patch)) if on]
        if len(parts) + files != 1:
            raise fail("give exactly one of --major, --minor, --patch or --files")
        report = bump_package(package, None if files else parts[0])  # type: ignore[arg-type]
        what = ", ".join(report.changed) if report.changed else "no file changed"
        print(f"{package}: {report.old_version} -> {report.new_version} ({what})")
        if report.unsigned:
            print("the signature was removed: sign again with `edgefleet models pack --key`")

    @models.command("pack", no_args_is_help=True)
    def pack(
        package: Annotated[Path, typer.Argument(help="Model package folder (or tar)")],
        key: Annotated[Path | None, typer.Option(help="Publisher private key (PEM) to sign with")] = None,
        out: Annotated[Path | None, typer.Option(help="Archive to write (default NAME-VERSION.tar)")] = None,
    ) -> None:
        """Check a package as the controller will, sign it and write the reproducible tar that
        `models push` uploads and agents load."""
        from .._package import load_package
        from .._packaging import pack_package

        if out is None:
            m = load_package(package).manifest
            out = Path(f"{m.name}-{m.version}.tar")
        if out.resolve() == package.resolve():
            raise fail(f"--out {out} is the package itself")
        path, sha, size = pack_package(package, out, key=key)
        signed = f"signed with {key}" if key else "unsigned (pass --key to sign)"
        print(f"{path}: sha256 {sha}, {size} bytes, {signed}")

    @models.command("verify", no_args_is_help=True)
    def verify(
        package: Annotated[Path, typer.Argument(help="Model package folder or tar")],
        trusted_key: Annotated[
            list[Path] | None, typer.Option("--trusted-key", help="Public key (PEM) a signature must verify against")
        ] = None,
        require_signature: Annotated[bool, typer.Option(help="Refuse an unsigned package")] = False,
        load: Annotated[bool, typer.Option(help="Also load and dry-run it in ONNX Runtime")] = True,
    ) -> None:
        """Every check a package meets on its way to a device: schema, files, signature, the ONNX model
        against the manifest, the decoder against its outputs, and the load the agent makes."""
        from .._packaging import verify_package
        from .._signing import key_id, load_public_key

        keys = {key_id(k): k for k in (load_public_key(p) for p in trusted_key or [])}
        report = verify_package(
            package, trusted_keys=keys or None, require_signature=require_signature or bool(keys), load=load
        )
        m = report.package.manifest
        sig = (
            f"signed by key {report.signed_by}"
            if report.signed_by
            else "signature not checked (unsigned or no --trusted-key)"
        )
        ran = "loaded and run in ONNX Runtime" if report.loaded else "not loaded"
        print(f"{package}: {m.ref} verifies ({len(m.files)} files, {sig}, {ran})")

    @models.command("quantize", no_args_is_help=True)
    def quantize(
        package: Annotated[Path, typer.Argument(help="FP32 model package folder or tar")],
        calibrate: Annotated[Path, typer.Option(help="Clip or image folder like the scenes the model will see")],
        frames: Annotated[int, typer.Option(min=1, help="Frames to calibrate on (the first N)")] = 200,
        held_out: Annotated[int, typer.Option(min=1, help="Frames after those, to check INT8 against FP32")] = 100,
        check: Annotated[
            Path | None, typer.Option(help="Check on this clip or folder's first HELD_OUT frames instead")
        ] = None,
        out: Annotated[Path | None, typer.Option(help="Package folder to write (default PACKAGE-int8)")] = None,
        version: Annotated[str | None, typer.Option(help="Version of the INT8 package (default: next minor)")] = None,
        method: Annotated[str, typer.Option(help="Calibration: minmax, entropy or percentile")] = "minmax",
        min_recall: Annotated[float, typer.Option(min=0, max=1, help="Detectors: least recall vs FP32")] = 0.95,
        min_precision: Annotated[float, typer.Option(min=0, max=1, help="Detectors: least precision vs FP32")] = 0.90,
        min_top1: Annotated[float, typer.Option(min=0, max=1, help="Classifiers: least top-1 agreement")] = 0.95,
        full_range: Annotated[
            bool,
            typer.Option(
                help="8-bit weights: only if every CPU it will run on has VNNI (or it runs on a GPU); "
                "by default 7-bit, which x86 CPUs without VNNI run without saturating"
            ),
        ] = False,
        activations: Annotated[
            str,
            typer.Option(
                help="uint8 (ONNX Runtime's fastest on x86 CPUs) or int8: symmetric, zero point 0, as TensorRT "
                "needs (Jetson, the TensorRT backend)"
            ),
        ] = "uint8",
        force: Annotated[bool, typer.Option(help="Replace OUT if it exists")] = False,
    ) -> None:
        """An INT8 (QDQ) version made with ONNX Runtime's quantization tools, checked against the FP32
        version on held-out frames (detections matched at IoU 0.5; a classifier's top-1) and written only
        when it meets the minimums; the figures go into its manifest."""
        from .._packaging import quantize_package

        r = quantize_package(
            package,
            calibrate,
            out,
            check=check,
            frames=frames,
            held_out=held_out,
            version=version,
            method=method,
            min_recall=min_recall,
            min_precision=min_precision,
            min_top1=min_top1,
            full_range=full_range,
            activations=activations,
            force=force,
        )
        q = r.package.manifest.quantization
        assert q is not None
        a = r.agreement
        if q.top1_agreement is not None:
            figures = f"top-1 agreement {q.top1_agreement:.4f} on {a.frames} held-out frames"
            if q.top1_agreement_confident is not None:
                figures += f" ({q.top1_agreement_confident:.4f} on the {a.confident} where FP32's best score is >= 0.5)"
        else:
            figures = (
                f"recall {q.recall:.4f}, precision {q.precision:.4f} vs FP32 on {a.frames} held-out frames "
                f"({a.matched} of {a.reference} FP32 detections matched; INT8 found {a.candidate})"
            )
        print(f"wrote {r.root} ({r.package.ref}): {figures}")
        print(f"one thread, this machine: FP32 {r.fp32_ms:.1f} ms, INT8 {r.int8_ms:.1f} ms per frame")
        tail = [
            n.split(": ", 1)[1].split(" ")[0] for n in r.left_in_float if n.endswith("after the last weighted layer")
        ]
        for node in r.left_in_float:
            if not node.endswith("after the last weighted layer"):
                print(f"kept in floating point: {node}")
        if tail:
            kinds = ", ".join(sorted(set(tail)))
            print(f"kept in floating point: {len(tail)} nodes after the last weighted layer ({kinds})")
