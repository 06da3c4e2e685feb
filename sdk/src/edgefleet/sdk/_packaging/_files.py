"""Writing manifests: the ``files`` table (every file's sha256 and size) and the YAML layout edgefleet's
own tools write, edited in place where a user may have added comments."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from .._errors import ManifestError
from .._package import file_sha256

__all__ = ["dump_manifest", "file_table", "replace_folder", "replace_top_level"]


def replace_folder(stage: Path, out: Path) -> None:
    """Put the finished folder ``stage`` (beside ``out``) in the place of ``out``, whatever was there."""
    if out.exists():
        shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
    os.replace(stage, out)


def file_table(root: Path, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """``{name: {sha256, size}}`` for ``names`` (default: every regular file under ``root`` but
    manifest.yaml and hidden ones), sorted."""
    if names is None:
        names = [
            p.relative_to(root).as_posix()
            for p in sorted(root.rglob("*"))
            if p.is_file()
            and not p.is_symlink()
            and p.name != "manifest.yaml"
            and not any(part.startswith(".") for part in p.relative_to(root).parts)
        ]
    table = {}
    for name in sorted(names):
        path = root / name
        if not path.is_file():
            raise ManifestError(f"{root}: {name} is listed in the manifest but missing")
        table[name] = {"sha256": file_sha256(path), "size": path.stat().st_size}
    return table


def dump_manifest(fields: dict[str, Any], header: str = "") -> str:
    """The manifest as YAML: keys in the given order, short lists and mappings in flow style."""
    text = yaml.safe_dump(fields, sort_keys=False, default_flow_style=None, width=120, allow_unicode=True)
    lines = [f"# {line}".rstrip() for line in header.splitlines()] if header else []
    return "\n".join([*lines, text]) if lines else text


_TOP = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):")


def replace_top_level(text: str, key: str, value: Any | None) -> str:
    """``text`` with the top-level ``key:`` block (its line and the indented or comment lines under it)
    replaced by ``key: value`` in YAML, or removed when ``value`` is None; appended when absent. Every
    other line, comments included, is kept as it was."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if (m := _TOP.match(line)) and m.group(1) == key), None)
    flow = None if isinstance(value, (dict, list)) else False  # a lone scalar must not become {key: v}
    block = "" if value is None else yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=flow, width=120)
    if start is None:
        if not block:
            return text
        return text + ("" if text.endswith("\n") or not text else "\n") + block
    end = start + 1
    while end < len(lines) and (lines[end].startswith((" ", "\t", "-")) or not lines[end].strip()):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # keep the blank lines before the next key
        end -= 1
    return "".join(lines[:start]) + block + "".join(lines[end:])
