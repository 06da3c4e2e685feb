"""``edgefleet models bump``: a new version of a package folder after its files changed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from .._errors import ManifestError
from .._manifest import parse_manifest, read_manifest
from ._files import file_table, replace_top_level

__all__ = ["BumpReport", "bump_package", "next_version"]

Part = Literal["major", "minor", "patch"]


@dataclass(frozen=True)
class BumpReport:
    old_version: str
    new_version: str
    changed: tuple[str, ...]  # listed files whose sha256 or size was re-recorded
    unsigned: bool  # a signature was removed (it covered the old manifest)


def next_version(version: str, part: Part) -> str:
    """``1.4.2`` -> ``2.0.0`` / ``1.5.0`` / ``1.4.3``; a pre-release or build suffix is dropped (bumping
    ``1.4.2-rc.1`` by a patch releases ``1.4.3``)."""
    core = version.split("+", 1)[0].split("-", 1)[0]
    major, minor, patch = (int(x) for x in core.split("."))
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


def bump_package(root: Path, part: Part | None) -> BumpReport:
    """Give the package folder ``root`` the next ``part`` version (None: keep the version) and record
    the current sha256 and size of every file its manifest lists. A signature is removed (it no longer
    covers the manifest; ``models pack --key`` signs again). The rest of manifest.yaml, comments
    included, is left as it is. Raises :class:`ManifestError` for a folder that is not a package or a
    listed file that is missing."""
    if not root.is_dir():
        raise ManifestError(f"{root}: a package folder is needed (a tar is changed by unpacking it first)")
    path = root / "manifest.yaml"
    manifest = read_manifest(path)
    text = path.read_text(encoding="utf-8")
    files = file_table(root, list(manifest.files))
    changed = tuple(
        k for k, v in files.items() if (v["sha256"], v["size"]) != (manifest.files[k].sha256, manifest.files[k].size)
    )
    version = manifest.version if part is None else next_version(manifest.version, part)
    text = replace_top_level(text, "version", version)
    text = replace_top_level(text, "files", files)
    unsigned = manifest.signature is not None
    if unsigned:
        text = replace_top_level(text, "signature", None)
    parse_manifest(yaml.safe_load(text), str(path))  # what is written must load
    tmp = path.with_name(".manifest.yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return BumpReport(manifest.version, version, changed, unsigned)
