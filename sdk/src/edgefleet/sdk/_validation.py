"""One readable message out of a pydantic ``ValidationError``: the file (or argument) and every field.

A field of a plugged kind (a source, backend, decoder, sink or analytics config, see ``_registry``) is
validated against the schema its ``type`` selects; its errors carry that key in their location as
``(key)``, and are written ``decoder (yolo): reg_max: ...``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

__all__ = ["format_validation_error", "where"]


def format_validation_error(exc: ValidationError, source: str, prefix: tuple[str, ...] = ()) -> str:
    """One readable message naming the file and each offending field (``prefix`` goes before each
    field's location)."""
    return f"{source}: " + "; ".join(f"{where((*prefix, *err['loc']))}: {_plain(err)}" for err in exc.errors())


def where(loc: tuple[Any, ...]) -> str:
    """``('sources', 1, '(network)', 'url')`` -> ``sources.1 (network): url``."""
    out = ""
    for part in loc:
        text = str(part)
        if text.startswith("(") and text.endswith(")") and out:
            out += f" {text}:"
        elif out.endswith(":"):
            out += f" {text}"
        else:
            out += f".{text}" if out else text
    return out.rstrip(":") or "(top level)"


def _plain(err: Any) -> str:
    """pydantic's message, with the phrasings that name Python internals said in a user's words."""
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    if kind == "path_type":
        return "must be a path (a string)"
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        field = str(ctx.get("discriminator", "type")).strip("'")
        if kind == "union_tag_not_found":
            return f"needs a {field} field"
        return f"{field} {ctx.get('tag')!r} is not one of {ctx.get('expected_tags')}"
    return str(err["msg"])
