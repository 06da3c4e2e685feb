"""Turning a package folder into the registry's artifact: an optionally signed, reproducible tar."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import yaml

from edgefleet.sdk import load_package, load_private_key, sign_manifest
from edgefleet.sdk._onnx_check import check_model_file

__all__ = ["pack_package"]


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
    ModelPackageError for a model file that is not a readable ONNX model and ModelMismatchError for one whose
    inputs or outputs contradict the manifest: refused here, before anything is uploaded.
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
