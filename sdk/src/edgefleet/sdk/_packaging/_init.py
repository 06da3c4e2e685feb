"""``edgefleet models init``: a complete model package from a plain ONNX file."""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import BackendUnavailableError, EdgefleetError, ModelPackageError
from .._names import NAME_RE
from .._onnx_check import read_model_interface
from .._package import ModelPackage, load_package
from .._package import read_labels as _read_label_file
from ._files import dump_manifest, file_table, replace_folder
from ._guess import Note, guess_manifest

__all__ = ["InitReport", "init_package", "read_labels"]


@dataclass
class InitReport:
    """What ``init_package`` wrote and said. ``problem``: why loading the new package failed (the package
    is written all the same, for the user to correct), or None when it loads and runs."""

    root: Path
    package: ModelPackage
    notes: list[Note] = field(default_factory=list)
    problem: str | None = None
    loaded: bool = False


def read_labels(path: Path) -> list[str]:
    """``--labels``: one label per line (blank lines skipped), UTF-8; at least one."""
    labels = list(_read_label_file(path))
    if not labels:
        raise ModelPackageError(f"{path}: no labels in it (one per line)")
    return labels


def _default_name(model: Path) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", model.stem.lower()).strip("-._") or "model"
    return name[:64]


def _header(notes: list[Note]) -> str:
    lines = ["Written by `edgefleet models init`. What it found, guessed and left for you to confirm:"]
    lines += [f"  {n.kind:8} {n.text}" for n in notes]
    lines.append("After editing a listed file, `edgefleet models bump` records its new sha256 and size.")
    return "\n".join(lines)


def _resolve(root: Path, fields: dict[str, Any], notes: list[Note]) -> tuple[bool, str | None]:
    """Load the staged package as ``run`` would (ONNX Runtime, one dry run where the graph leaves output
    dimensions symbolic) and put the real output shapes into ``fields``. (loaded, problem)."""
    from .._model import load_model

    try:
        pkg = load_package(root)
        model = load_model(pkg, max_batch=1, warmup=False, buffers=2)
    except BackendUnavailableError:
        notes.append(Note("confirm", "ONNX Runtime is not installed here: the package was not loaded and run"))
        return False, None
    except EdgefleetError as exc:
        return False, str(exc)
    try:
        for out in fields["outputs"]:
            real = model.output_shapes.get(out["name"])
            if real is not None and list(real[1:]) != out["shape"][1:]:
                out["shape"] = [out["shape"][0], *real[1:]]
                notes.append(Note("found", f"output {out['name']} {out['shape']} on a dry run (symbolic in the graph)"))
    finally:
        model.close()
    return True, None


def init_package(
    model: Path,
    out: Path | None = None,
    *,
    name: str | None = None,
    version: str = "1.0.0",
    labels: Path | None = None,
    imgsz: tuple[int, int] | None = None,
    force: bool = False,
    load: bool = True,
) -> InitReport:
    """Write a complete package for the ONNX file ``model`` into ``out`` (default: ``./<name>``): the model
    copied in, ``labels.txt``, and a ``manifest.yaml`` with the input spec, outputs, decoder, labels and
    every file's sha256 and size, guessed from the file (see ``_guess``). With ``load`` the new package is
    then loaded in ONNX Runtime and run once where its output shapes are symbolic, so the manifest holds
    the real shapes and the checks ``edgefleet run`` makes have passed.

    Raises :class:`ModelPackageError` when the file is not a model edgefleet can feed, or ``out`` exists
    (unless ``force``).
    """
    info = read_model_interface(model)
    name = name or _default_name(model)
    if not NAME_RE.match(name):
        raise ModelPackageError(f"--name {name!r} must match [a-z0-9][a-z0-9._-]{{0,63}}")
    out = out if out is not None else Path.cwd() / name
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise ModelPackageError(f"{out} exists; choose another --out or pass --force to replace it")
    label_list = read_labels(labels) if labels is not None else None
    draft = guess_manifest(info, model_file=model.name, name=name, version=version, labels=label_list, imgsz=imgsz)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out.parent))
    try:
        shutil.copyfile(model, stage / model.name)
        if draft.labels:
            (stage / "labels.txt").write_text("\n".join(draft.labels) + "\n", encoding="utf-8")
            draft.fields["labels"] = "labels.txt"
        draft.fields["files"] = file_table(stage)
        manifest = stage / "manifest.yaml"
        manifest.write_text(dump_manifest(draft.fields, _header(draft.notes)), encoding="utf-8")
        loaded, problem = _resolve(stage, draft.fields, draft.notes) if load else (False, None)
        manifest.write_text(dump_manifest(draft.fields, _header(draft.notes)), encoding="utf-8")
        load_package(stage)  # the schema and every hash, as anyone loading it will check them
        replace_folder(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return InitReport(out, load_package(out), draft.notes, problem, loaded)
