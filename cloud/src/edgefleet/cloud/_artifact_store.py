"""The model registry's artifact store: package tars content-addressed by sha256 on disk, checked at
push (size, sha256, manifest, every file's hash, the signature against the trusted publisher keys, and the
model file: a readable ONNX model whose inputs and outputs match the manifest)."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from edgefleet.sdk import EdgefleetError, IntegrityError, check_archive, load_package
from edgefleet.sdk.kit import check_model_file

from ._errors import RegistryError

__all__ = ["SHA256_RE", "ArtifactStore", "Upload"]

_log = logging.getLogger(__name__)
SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")


class Upload:
    """An artifact being received: bytes go to a temporary file and into a running sha256."""

    def __init__(self, store: ArtifactStore, size: int, sha256: str) -> None:
        self.store = store
        self.size = size
        self.sha256 = sha256
        self.received = 0
        self._hash = hashlib.sha256()
        fd, name = tempfile.mkstemp(prefix="push-", dir=store.incoming)
        self.path = Path(name)
        self._file: BinaryIO = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        self.received += len(data)
        if self.received > self.size:
            raise RegistryError(f"artifact is larger than the {self.size} bytes announced")
        self._hash.update(data)
        self._file.write(data)

    def finish(self) -> None:
        self._file.close()
        if self.received != self.size:
            raise RegistryError(f"artifact truncated: received {self.received} of {self.size} bytes")
        digest = self._hash.hexdigest()
        if digest != self.sha256:
            raise RegistryError(f"artifact sha256 is {digest[:12]}…, the client announced {self.sha256[:12]}…")

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.path.unlink(missing_ok=True)


class ArtifactStore:
    """``root/ab/abcdef…``: one file per artifact, named by its sha256, written once atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.incoming = root / ".incoming"
        self.incoming.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        if not SHA256_RE.match(sha256):
            raise RegistryError(f"not a sha256: {sha256[:70]!r}")
        return self.root / sha256[:2] / sha256

    def begin(self, size: int, sha256: str) -> Upload:
        self.path(sha256)  # validates
        return Upload(self, size, sha256)

    def inspect(
        self,
        upload: Upload,
        trusted_keys: Mapping[str, Any],
        allow_unsigned: bool,
        revoked_keys: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """Verify the uploaded package and return the registry row for it (blocking: run off the loop)."""
        try:
            check_archive(upload.path, unpack_to=self.incoming)
        except IntegrityError as exc:
            raise RegistryError(str(exc)) from None
        unpack = Path(tempfile.mkdtemp(prefix="inspect-", dir=self.incoming))
        try:
            pkg = load_package(
                upload.path,
                trusted_keys=dict(trusted_keys),
                require_signature=not allow_unsigned,
                unpack_dir=unpack,
            )
            check_model_file(pkg.root, pkg.manifest, "artifact", pkg.labels)
        except EdgefleetError as exc:
            raise RegistryError(
                str(exc).replace(str(upload.path), "artifact").replace(str(unpack), "artifact")
            ) from None
        finally:
            shutil.rmtree(unpack, ignore_errors=True)
        m = pkg.manifest
        key = pkg.signed_by or (m.signature.key_id if m.signature else None)
        if key is not None and key in revoked_keys:
            raise RegistryError(f"{m.name}:{m.version} is signed by key {key}, which is revoked")
        return {
            "sha256": upload.sha256,
            "name": m.name,
            "version": m.version,
            "size": upload.size,
            "task": m.task,
            "description": m.description,
            "signed_by": pkg.signed_by or "",
            "manifest": m.model_dump(mode="json", exclude_none=True),
        }

    def intact(self, sha256: str, size: int) -> bool:
        """Whether the stored copy exists with the right size and sha256 (blocking: run off the loop)."""
        path = self.path(sha256)
        if not path.is_file() or path.stat().st_size != size:
            return False
        h = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest() == sha256

    def commit(self, upload: Upload) -> Path:
        dest = self.path(upload.sha256)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(upload.path, dest)
        _log.info("stored artifact %s (%d bytes)", upload.sha256[:12], upload.size)
        return dest
