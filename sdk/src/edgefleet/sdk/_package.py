"""Loading a model package from disk and checking every file against its manifest."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tarfile
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ._archive import check_archive
from ._errors import IntegrityError, ManifestError, SignatureError
from ._manifest import Manifest, read_manifest
from ._signing import PublicKey, verify_manifest

__all__ = ["ModelPackage", "file_sha256", "load_package", "read_labels"]

_log = logging.getLogger(__name__)
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class ModelPackage:
    """A model package whose files were checked against its manifest.

    Example::

        pkg = load_package("models/nanodet-m")
        print(pkg.ref, pkg.manifest.task, len(pkg.labels))
    """

    root: Path
    manifest: Manifest
    labels: tuple[str, ...] = field(default=())
    signed_by: str | None = None

    @property
    def ref(self) -> str:
        return self.manifest.ref

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def model_path(self) -> Path:
        return self.root / self.manifest.model

    def path_of(self, relative: str) -> Path:
        return self.root / relative


def _inside(root: Path, rel: str) -> Path:
    path = root / rel
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise IntegrityError(f"{root}: {rel} resolves outside the package")
    return path


def verify_files(root: Path, manifest: Manifest) -> None:
    """Check that each listed file exists, is a regular file inside ``root`` and has the listed size and sha256."""
    for rel, entry in sorted(manifest.files.items()):
        path = _inside(root, rel)
        if path.is_symlink():
            raise IntegrityError(f"{root}: {rel} is a symbolic link; packages hold regular files only")
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise IntegrityError(f"{root}: {rel} is listed in the manifest but missing") from None
        if not path.is_file():
            raise IntegrityError(f"{root}: {rel} is not a regular file")
        if size != entry.size:
            raise IntegrityError(
                f"{root}: {rel} has {size} bytes, the manifest says {entry.size} (truncated or replaced?)"
            )
        digest = file_sha256(path)
        if digest != entry.sha256:
            raise IntegrityError(
                f"{root}: {rel} sha256 is {digest[:16]}…, the manifest says {entry.sha256[:16]}… (corrupt?)"
            )


def _read_labels(root: Path, manifest: Manifest) -> tuple[str, ...]:
    if manifest.labels is None:
        return ()
    if isinstance(manifest.labels, tuple):
        return manifest.labels
    return read_labels(root / manifest.labels)


def read_labels(path: Path) -> tuple[str, ...]:
    """A labels file: one label per line, UTF-8, blank lines skipped. Raises :class:`ManifestError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ManifestError(f"{path}: labels must be UTF-8 text, one per line") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the labels: {exc.strerror}") from None
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def _unpack_tar(archive: Path, into: Path) -> Path:
    """Unpack a package tar into ``into``; refuses links, devices and paths leaving the folder."""
    into.mkdir(parents=True, exist_ok=True)
    try:
        check_archive(archive, unpack_to=into)
    except IntegrityError as exc:
        raise IntegrityError(f"{archive}: {exc}") from None
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise IntegrityError(f"{archive}: cannot unpack: {exc}") from None
    candidates = [p.parent for p in into.rglob("manifest.yaml")]
    if len(candidates) != 1:
        raise ManifestError(f"{archive}: expected exactly one manifest.yaml in the archive, found {len(candidates)}")
    return candidates[0]


def load_package(
    path: str | os.PathLike[str],
    *,
    verify: bool = True,
    trusted_keys: Mapping[str, PublicKey] | None = None,
    require_signature: bool = False,
    unpack_dir: str | os.PathLike[str] | None = None,
) -> ModelPackage:
    """Load a model package directory (or ``.tar``/``.tar.gz``) and check it.

    ``verify`` checks every file's size and sha256. With ``trusted_keys`` the signature must verify
    against one of them; ``require_signature`` refuses unsigned packages.

    Raises :class:`ManifestError`, :class:`IntegrityError` or :class:`SignatureError` with a message that
    names the package and the offending file or field.
    """
    root = Path(path)
    if not root.exists():
        raise ManifestError(f"{root}: no such model package")
    scratch: Path | None = None  # a temporary folder of ours: removed with the package (or on failure)
    if root.is_file():
        if not tarfile.is_tarfile(root):
            raise ManifestError(f"{root}: a model package is a folder with manifest.yaml, or a tar of one")
        if unpack_dir:
            dest = Path(unpack_dir)
        else:
            dest = scratch = Path(tempfile.mkdtemp(prefix="edgefleet-pkg-"))
        try:
            root = _unpack_tar(root, dest)
        except BaseException:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise
    try:
        pkg = _check_package(root, verify, trusted_keys, require_signature)
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    if scratch is not None:
        weakref.finalize(pkg, shutil.rmtree, scratch, ignore_errors=True)
    return pkg


def _check_package(
    root: Path, verify: bool, trusted_keys: Mapping[str, PublicKey] | None, require_signature: bool
) -> ModelPackage:
    manifest = read_manifest(root / "manifest.yaml")
    if verify:
        verify_files(root, manifest)
    signed_by = None
    if manifest.signature is None:
        if require_signature:
            raise SignatureError(f"{root}: package {manifest.ref} is not signed")
    elif trusted_keys is not None:
        signed_by = verify_manifest(manifest, trusted_keys, source=str(root))
    labels = _read_labels(root, manifest)
    _log.debug("loaded package %s from %s", manifest.ref, root)
    return ModelPackage(root=root, manifest=manifest, labels=labels, signed_by=signed_by)
