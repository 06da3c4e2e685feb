"""A package folder turned into the registry's artifact (an optionally signed, reproducible tar), and the
whole set of checks a package must pass before it is shipped."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from .._errors import BackendUnavailableError
from .._onnx_check import check_model_file
from .._package import ModelPackage, load_package
from .._signing import PublicKey, load_private_key, sign_manifest

__all__ = ["VerifyReport", "pack_package", "verify_package"]


def _add(tar: tarfile.TarFile, arcname: str, data: bytes) -> None:
    info = tarfile.TarInfo(arcname)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def pack_package(package: Path, out: Path, *, key: Path | None = None) -> tuple[Path, str, int]:
    """Check ``package`` (folder or tar), sign its manifest with ``key`` when given, and write a
    reproducible tar (sorted entries, zeroed owners and times) to ``out``. Returns (path, sha256, size).

    Raises the SDK's ManifestError / IntegrityError / SignatureError for a package that does not verify,
    ModelPackageError for a model file that is not a readable ONNX model, ModelMismatchError for one whose
    inputs or outputs contradict the manifest and DecoderError for a decoder that does not fit them:
    refused here, before anything is uploaded.

    Example::

        path, sha256, size = pack_package(Path("yolov8n"), Path("yolov8n-1.0.0.tar"), key=Path("publisher.pem"))
    """
    pkg = load_package(package)
    check_model_file(pkg.root, pkg.manifest, str(package), pkg.labels)
    manifest = pkg.manifest
    if key is not None:
        manifest = sign_manifest(manifest, load_private_key(key))
    text = yaml.safe_dump(manifest.model_dump(mode="json", exclude_none=True), sort_keys=False).encode()
    top = f"{manifest.name}-{manifest.version}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, f"{top}/manifest.yaml", text)
        for rel in sorted(manifest.files):
            _add(tar, f"{top}/{rel}", (pkg.root / rel).read_bytes())
    h = hashlib.sha256()
    with out.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return out, h.hexdigest(), os.path.getsize(out)


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_package` checked: the package, who signed it (None: unsigned, or no trusted
    keys given), and whether the model was loaded and run (False where ONNX Runtime is not installed)."""

    package: ModelPackage
    signed_by: str | None
    loaded: bool


def verify_package(
    package: Path,
    *,
    trusted_keys: Mapping[str, PublicKey] | None = None,
    require_signature: bool = False,
    load: bool = True,
) -> VerifyReport:
    """Every check a package meets on its way to a device: schema, files (size, sha256), signature
    (against ``trusted_keys``), the ONNX file against the manifest and the decoder against its outputs
    (what ``models push`` and the controller check) and, with ``load``, the load the agent makes (ONNX
    Runtime, a dry run where output dimensions are symbolic). Raises the first problem found."""
    pkg = load_package(package, trusted_keys=trusted_keys, require_signature=require_signature)
    check_model_file(pkg.root, pkg.manifest, str(package), pkg.labels)
    loaded = False
    if load:
        from .._model import load_model

        try:
            model = load_model(pkg, max_batch=1, warmup=False, buffers=2)
        except BackendUnavailableError:  # no ONNX Runtime here: the file checks above are what is left
            model = None
        if model is not None:
            model.close()
            loaded = True
    return VerifyReport(pkg, pkg.signed_by, loaded)
