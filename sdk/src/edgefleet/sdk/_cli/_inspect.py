"""``edgefleet models inspect``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .._decoders import DECODERS, decoder_names
from .._onnx_check import check_model_file
from .._package import ModelPackage, load_package

__all__ = ["inspect_command"]


def _load_and_check(pkg: ModelPackage) -> dict[str, Any]:
    """The real tensors, after the checks ``run`` makes at load (an application's own decoder, which
    this process does not know, is left out)."""
    from .._backends import OnnxRuntimeConfig, create_backend
    from .._model import check_io, load_model, resolve_outputs

    if pkg.manifest.decoder.type in decoder_names():
        model = load_model(pkg, max_batch=1, warmup=False, buffers=2)
        backend, shapes = model.backend, model.output_shapes
        close = model.close
    else:
        backend = create_backend(OnnxRuntimeConfig(), "cpu")
        close = backend.close
        try:
            backend.load(pkg.model_path)
            check_io(pkg.manifest, backend, str(pkg.root))
            backend.declare_input_shape(pkg.manifest.input.shape)
            shapes = resolve_outputs(pkg.manifest, backend, backend.allocate_input(1), str(pkg.root))
        except BaseException:
            close()
            raise
    try:
        return {
            "inputs": [vars(t) for t in backend.inputs],
            "outputs": [{**vars(t), "shape": list(shapes.get(t.name, t.shape))} for t in backend.outputs],
        }
    finally:
        close()


def inspect_command(path: Path, *, as_json: bool, load: bool) -> None:
    """Verify the package and check its model the way ``run`` and the agent do: with ``load``, load it in
    ONNX Runtime (real tensors, a dry run where the graph leaves output dimensions symbolic, the
    decoder built against them); without, read the ONNX file and build the decoder against its graph
    (what ``models push`` and the controller check)."""
    pkg = load_package(path)  # verifies sizes and hashes; raises with the file named
    m = pkg.manifest
    entry = DECODERS.get(m.decoder.type)
    real: dict[str, Any] | None = None
    if load:
        real = _load_and_check(pkg)
    elif m.model.lower().endswith(".onnx"):  # another format is a plugin backend's to read
        check_model_file(pkg.root, m, str(pkg.root), pkg.labels)
    info: dict[str, Any] = {
        "ref": m.ref,
        "task": m.task,
        "description": m.description,
        "license": m.license,
        "input": m.input.model_dump(mode="json"),
        "outputs": [o.model_dump(mode="json") for o in m.outputs],
        "decoder": m.decoder.model_dump(mode="json"),
        "decoder_built_in": entry is not None and entry.origin == "built-in",
        # where the decoder comes from here (an installed plugin's entry point, ...); None: nowhere, so
        # `edgefleet run` cannot serve the model on this machine
        "decoder_from": entry.origin if entry is not None else None,
        "labels": len(pkg.labels),
        "files": {k: v.model_dump() for k, v in m.files.items()},
        "verified": True,
        "signed": m.signature is not None,
        "key_id": m.signature.key_id if m.signature else None,
        "engines": {k: v.model_dump(mode="json") for k, v in m.engines.items()},
        "model_io": real,
    }
    if as_json:
        print(json.dumps(info, indent=2))
        return
    console = Console()
    t = Table(title=f"{m.ref}  ({path})", show_header=False)
    t.add_column("field")
    t.add_column("value")
    t.add_row("task", m.task)
    t.add_row("description", m.description)
    t.add_row("license", m.license or "")
    i = m.input
    t.add_row("input", f"{i.name} {list(i.shape)} {i.dtype} {i.layout} {i.color} {i.resize}")
    t.add_row("normalise", f"mean {list(i.mean)} std {list(i.std)}")
    t.add_row("outputs", ", ".join(f"{o.name} {list(o.shape)}" for o in m.outputs))
    t.add_row("decoder", json.dumps(m.decoder.model_dump(mode="json")))
    if entry is None:
        missing = DECODERS.unavailable().get(m.decoder.type)
        why = f": {missing}" if missing else f" ({', '.join(decoder_names())} are)"
        t.add_row(
            "",
            f"[yellow]{m.decoder.type!r} is not a built-in decoder nor one this installation has{why}; "
            "`edgefleet run` cannot serve this model here (install the plugin that provides it)[/]",
        )
    elif entry.origin != "built-in":
        t.add_row("", f"decoder from {entry.origin}")
    t.add_row("labels", f"{len(pkg.labels)} ({', '.join(pkg.labels[:5])}{', …' if len(pkg.labels) > 5 else ''})")
    t.add_row("files", f"{len(m.files)} verified (sha256 and size)")
    t.add_row("signature", f"ed25519 by key {m.signature.key_id}" if m.signature else "unsigned")
    if real is not None:
        t.add_row("model check", "[green]real tensors match the manifest; the decoder fits them[/]")
    else:
        t.add_row("model check", "[green]the ONNX graph matches the manifest; the decoder fits it[/] (not run)")
    console.print(t)
