#!/usr/bin/env python3
"""Shared helpers for the model build scripts in tools/models/.

A model package is a directory with a ``manifest.yaml`` (format
``edgefleet.model/v1``) plus the files it names.  The manifest's ``files``
section lists every other file of the directory, sorted by name, with its
sha256 and size, so a package can be verified without running anything.

Standard library only: the build scripts call this with whatever Python
they have at hand (the system one, or a throwaway venv).

Command line:
    python3 _package.py verify DIR     exit 0 if DIR/manifest.yaml exists and
                                       every file listed matches (and no file
                                       is missing from the list), else 1
    python3 _package.py files DIR      print the files section for DIR
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

FORMAT = "edgefleet.model/v1"
MANIFEST = "manifest.yaml"


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_entries(pkg_dir: str | os.PathLike) -> list[tuple[str, str, int]]:
    """(name, sha256, size) for every regular file in pkg_dir except the manifest, sorted by name."""
    pkg = Path(pkg_dir)
    out = []
    for p in sorted(pkg.iterdir(), key=lambda p: p.name):
        if p.name == MANIFEST or not p.is_file() or p.name.startswith("."):
            continue
        out.append((p.name, sha256_file(p), p.stat().st_size))
    return out


# --------------------------------------------------------------------------
# A tiny YAML emitter, so the manifest has exactly the documented layout
# (block mappings, flow-style lists and small flow mappings) without PyYAML.

_RESERVED = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~", ""}
_INDICATORS = set("-?:,[]{}#&*!|>'\"%@`")


def _needs_quotes(s: str, flow: bool) -> bool:
    if s.lower() in _RESERVED or s[0] in _INDICATORS or s[0].isspace() or s[-1].isspace():
        return True
    if ": " in s or " #" in s or s.endswith(":") or "\n" in s or "\t" in s:
        return True
    if flow and any(c in s for c in ",[]{}:#"):
        return True
    try:  # anything a YAML loader could read as a number stays a string
        float(s.replace("_", ""))
        return True
    except ValueError:
        pass
    if s[0].isdigit() and ":" in s:  # YAML 1.1 sexagesimal numbers
        return True
    return False


def _scalar(v, flow: bool = False) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r if ("." in r or "e" in r or "inf" in r or "nan" in r) else r + ".0"
    s = str(v)
    if not _needs_quotes(s, flow):
        return s
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _flow(v, top: bool = False) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_flow(x) for x in v) + "]"
    return _scalar(v, flow=not top)


class Flow(dict):
    """A mapping written in flow style on one line: {a: 1, b: 2}."""


def _emit(obj: dict, indent: int, lines: list[str]) -> None:
    pad = "  " * indent
    for k, v in obj.items():
        if isinstance(v, Flow):
            lines.append(f"{pad}{k}: {_flow(v, top=True)}")
        elif isinstance(v, dict):
            lines.append(f"{pad}{k}:")
            _emit(v, indent + 1, lines)
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v):
            lines.append(f"{pad}{k}:")
            for x in v:
                lines.append(f"{pad}  - {_flow(x)}")
        else:
            lines.append(f"{pad}{k}: {_flow(v, top=True)}")


def write_manifest(pkg_dir: str | os.PathLike, manifest: dict, header: str | None = None) -> Path:
    """Write pkg_dir/manifest.yaml from ``manifest`` (without ``files``), adding the
    files section computed from the directory's contents.  Returns the path."""
    pkg = Path(pkg_dir)
    m = dict(manifest)
    m.pop("files", None)
    if m.get("format") != FORMAT:
        m = {"format": FORMAT, **{k: v for k, v in m.items() if k != "format"}}
    lines: list[str] = []
    if header:
        lines += ["# " + h if h else "#" for h in header.splitlines()]
    _emit(m, 0, lines)
    lines.append("files:")
    for name, digest, size in file_entries(pkg):
        lines.append(f"  {_scalar(name)}: {{sha256: {_scalar(digest, flow=True)}, size: {size}}}")
    path = pkg / MANIFEST
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


_FILE_LINE = re.compile(
    r'^  ("?)(?P<name>[^"]+?)\1:\s*\{\s*sha256:\s*"?(?P<sha>[0-9a-f]{64})"?\s*,\s*size:\s*(?P<size>\d+)\s*\}\s*$'
)


def read_files_section(manifest_path: str | os.PathLike) -> dict[str, tuple[str, int]]:
    """Parse the ``files:`` block of a manifest written by write_manifest."""
    files: dict[str, tuple[str, int]] = {}
    in_files = False
    for line in Path(manifest_path).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            in_files = line.rstrip() == "files:"
            continue
        if in_files:
            m = _FILE_LINE.match(line)
            if not m:
                raise ValueError(f"unparsable files entry: {line!r}")
            files[m["name"]] = (m["sha"], int(m["size"]))
    return files


def verify(pkg_dir: str | os.PathLike, quiet: bool = False) -> bool:
    """True if pkg_dir holds a manifest whose files section matches the directory exactly."""
    pkg = Path(pkg_dir)
    man = pkg / MANIFEST
    if not man.is_file():
        if not quiet:
            print(f"verify: {man} missing", file=sys.stderr)
        return False
    try:
        listed = read_files_section(man)
    except (OSError, ValueError) as e:
        if not quiet:
            print(f"verify: {man}: {e}", file=sys.stderr)
        return False
    actual = {n: (s, z) for n, s, z in file_entries(pkg)}
    if not listed:
        if not quiet:
            print(f"verify: {man} lists no files", file=sys.stderr)
        return False
    ok = True
    for name in sorted(set(listed) | set(actual)):
        if name not in actual:
            msg, ok = f"missing file {name}", False
        elif name not in listed:
            msg, ok = f"unlisted file {name}", False
        elif listed[name] != actual[name]:
            msg, ok = f"checksum/size mismatch for {name}", False
        else:
            continue
        if not quiet:
            print(f"verify: {pkg}: {msg}", file=sys.stderr)
    return ok


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "verify":
        ok = verify(argv[2])
        print(f"{argv[2]}: {'OK' if ok else 'FAILED'}")
        return 0 if ok else 1
    if len(argv) == 3 and argv[1] == "files":
        for name, digest, size in file_entries(argv[2]):
            print(f"  {_scalar(name)}: {{sha256: {_scalar(digest, flow=True)}, size: {size}}}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
