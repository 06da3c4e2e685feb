"""The agent's content-addressed model store: ``models/<sha256>/`` holds an unpacked, verified package.

Installing verifies the artifact's sha256 and size, then the package (every file's hash and the
signature against the trusted keys) in a staging folder, and renames it into place: a crash leaves either
nothing or a complete package."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from edgefleet.sdk import EdgefleetError, IntegrityError, ModelPackage, check_archive, load_package

from ._errors import ArtifactError

__all__ = ["ModelStore", "sha256_file"]

_log = logging.getLogger(__name__)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class ModelStore:
    def __init__(
        self,
        root: Path,
        trusted_keys: Mapping[str, Any],
        *,
        require_signature: bool = True,
        revoked_keys: Iterable[str] = (),
    ) -> None:
        self.root = root
        self.models = root / "models"
        self.downloads = root / "downloads"
        self.staging = root / "staging"
        for d in (self.models, self.downloads, self.staging):
            d.mkdir(parents=True, exist_ok=True)
        self.trusted_keys = dict(trusted_keys)
        self.require_signature = require_signature
        self.revoked_keys = frozenset(revoked_keys)
        self.sweep()

    def sweep(self) -> list[Path]:
        """Remove what a kill can leave behind (run at start-up): unpack folders in ``staging/`` and the
        download of an artifact that is installed already (a kill between the install and the removal of
        its ``.part``). An unfinished download stays: it resumes when its command comes again."""
        removed: list[Path] = []
        for leftover in self.staging.iterdir():  # from a crash mid-install
            shutil.rmtree(leftover, ignore_errors=True)
            removed.append(leftover)
        for part in self.downloads.glob("*.part"):
            if (self.models / part.name.removesuffix(".part")).is_dir():
                part.unlink(missing_ok=True)
                removed.append(part)
        if removed:
            _log.info(
                "removed %d leftover(s) of an interrupted install: %s", len(removed), ", ".join(p.name for p in removed)
            )
        return removed

    def partial(self, sha256: str) -> Path:
        return self.downloads / f"{sha256}.part"

    def _package_root(self, folder: Path) -> Path:
        found = [p.parent for p in folder.rglob("manifest.yaml")]
        if len(found) != 1:
            raise ArtifactError(f"{folder}: expected one manifest.yaml, found {len(found)}")
        return found[0]

    def load(self, path: Path, *, verify: bool = True) -> ModelPackage:
        """Load (and re-verify: every file's hash, ``verify``; the signature, always) a package already in
        the store or named in the config."""
        try:
            pkg = load_package(
                path,
                verify=verify,
                trusted_keys=self.trusted_keys or None,
                require_signature=self.require_signature and path.is_relative_to(self.models),
            )
        except EdgefleetError as exc:
            raise ArtifactError(str(exc)) from None
        self._check_revoked(pkg, str(path))
        return pkg

    def _check_revoked(self, pkg: ModelPackage, source: str) -> None:
        key = pkg.signed_by or (pkg.manifest.signature.key_id if pkg.manifest.signature else None)
        if key is not None and key in self.revoked_keys:
            raise ArtifactError(
                f"{source}: {pkg.ref} is signed by key {key}, which is revoked (revoked_keys); "
                "re-sign it with a trusted key"
            )

    def installed(self, sha256: str) -> Path | None:
        folder = self.models / sha256
        return self._package_root(folder) if folder.is_dir() else None

    def install(self, artifact: Path, sha256: str, size: int) -> ModelPackage:
        """Verify ``artifact`` and install it as ``models/<sha256>``; raises ArtifactError and leaves the
        store as it was when anything does not verify."""
        have = artifact.stat().st_size
        if size and have != size:
            raise ArtifactError(f"artifact {sha256[:12]}… is truncated: {have} of {size} bytes")
        digest = sha256_file(artifact)
        if digest != sha256:
            raise ArtifactError(f"artifact {sha256[:12]}… is corrupt: its sha256 is {digest[:12]}…")
        try:
            check_archive(artifact, unpack_to=self.staging)
        except IntegrityError as exc:
            raise ArtifactError(f"refused {sha256[:12]}…: {exc}") from None
        stage = Path(tempfile.mkdtemp(prefix=f"{sha256[:12]}-", dir=self.staging))
        try:
            try:
                pkg = load_package(
                    artifact,
                    trusted_keys=self.trusted_keys,
                    require_signature=self.require_signature,
                    unpack_dir=stage,
                )
            except EdgefleetError as exc:
                msg = str(exc).replace(str(stage), "artifact").replace(str(artifact), "artifact")
                raise ArtifactError(f"refused {sha256[:12]}…: {msg}") from None
            except OSError as exc:  # disk full while unpacking: the staging folder goes, nothing else
                raise ArtifactError(f"cannot unpack {sha256[:12]}…: {exc.strerror or exc}") from None
            if pkg.signed_by is None and self.require_signature:
                raise ArtifactError(f"refused {sha256[:12]}…: no trusted key verified its signature")
            self._check_revoked(pkg, f"refused {sha256[:12]}…")
            dest = self.models / sha256
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(stage, dest)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        _log.info("installed %s (%s)", pkg.ref, sha256[:12])
        # every file was hashed in staging a moment ago and only renamed since: a third pass over the
        # bytes would only compete with the pipelines for the CPU (the signature is checked again)
        return self.load(self._package_root(dest), verify=False)
