"""Model variants: one model version, several artifacts keyed by target (GPU architecture or Jetson SoC,
JetPack, TensorRT major, CUDA, CPU architecture, precision), and the pick for each device from the
capabilities its agent reports.

A target is a small mapping, e.g. ``{soc: orin, jetpack: "6", tensorrt: "10", precision: fp16}``. A
device matches it when every key it names matches the device: ``arch``, ``gpu`` and ``soc`` by
case-insensitive substring (``gpu: h200`` matches "NVIDIA H200"), ``jetpack``, ``tensorrt`` and ``cuda``
by leading version components (``tensorrt: "10"`` matches 10.3.0, not 11.0); ``precision`` is what the
artifact is, not something a device reports, and matches every device. Among the variants a device
matches, the one naming the most keys wins (the earliest pushed on a tie); a device that matches none
gets the portable artifact (the version's ONNX), and when the version has no portable artifact, it is
reported as not covered, never skipped in silence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from edgefleet.sdk.kit import NAME_RE

from ._db import model_variants, models
from ._errors import ConflictError, InvalidArgumentError

Row = dict[str, Any]

__all__ = ["TARGET_KEYS", "VariantStore", "check_target", "pick_variant", "variant_name"]

TARGET_KEYS = ("arch", "gpu", "soc", "jetpack", "tensorrt", "cuda", "precision")
_SUBSTRING = ("arch", "gpu", "soc")
_VERSION = ("jetpack", "tensorrt", "cuda")
_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,63}\Z")


def check_target(target: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in target.items():
        if k not in TARGET_KEYS:
            raise InvalidArgumentError(f"target: unknown key {k!r} (known: {', '.join(TARGET_KEYS)})")
        if not _VALUE.match(v):
            raise InvalidArgumentError(f"target: {k}={v!r} is not a plain value")
        if k in _VERSION and not re.match(r"^\d+(\.\d+)*\Z", v):
            raise InvalidArgumentError(f"target: {k} is a version such as 10 or 6.1, got {v!r}")
        out[k] = v
    return out


def variant_name(target: Mapping[str, str]) -> str:
    name = "-".join(f"{k}{target[k]}".lower().replace(" ", "").replace(".", "_") for k in TARGET_KEYS if k in target)
    return name[:64] or "portable"


def _matches(key: str, want: str, caps: Mapping[str, Any]) -> bool:
    if key == "precision":
        return True
    have = str(caps.get(key) or "")
    if not have:
        return False
    if key in _SUBSTRING:
        return want.lower() in have.lower()
    want_parts, have_parts = want.split("."), re.split(r"[.\s-]", have)
    return have_parts[: len(want_parts)] == want_parts


def pick_variant(variants: Sequence[Row], caps: Mapping[str, Any]) -> Row | None:
    """The variant for a device with capabilities ``caps`` (None: none matches)."""
    best: Row | None = None
    best_score = -1
    for v in variants:
        target: Mapping[str, str] = v["target"]
        if all(_matches(k, want, caps) for k, want in target.items()):
            score = sum(1 for k in target if k != "precision")
            if score > best_score:
                best, best_score = v, score
    return best


def describe(caps: Mapping[str, Any]) -> str:
    shown = [f"{k} {caps[k]}" for k in ("arch", "gpu", "soc", "jetpack", "tensorrt", "cuda") if caps.get(k)]
    return ", ".join(shown) or "no capabilities reported"


class VariantStore:
    def __init__(self, store: Any) -> None:
        self.store = store  # edgefleet.cloud._fleet_store.Store (which imports this module)

    def add(self, row: Row, target: dict[str, str], variant: str) -> tuple[Row, bool]:
        """Register a targeted artifact of ``row``'s version (``row``: what the registry's inspection
        returned). The version's ``models`` row is created (not portable) when it is the first artifact."""
        variant = variant or variant_name(target)
        if not NAME_RE.match(variant):
            raise InvalidArgumentError(f"variant name {variant!r} must match [a-z0-9][a-z0-9._-]{{0,63}}")
        v = model_variants
        with self.store.engine.begin() as c:
            old = c.execute(sa.select(v).where(v.c.sha256 == row["sha256"])).mappings().first()
            if old is not None:
                return dict(old), False
            base = c.execute(
                sa.select(models.c.sha256).where(models.c.name == row["name"], models.c.version == row["version"])
            ).first()
            if base is not None and base[0] == row["sha256"]:
                raise ConflictError(f"{row['name']}:{row['version']} already has this artifact as its portable one")
            taken = c.execute(
                sa.select(v.c.sha256).where(
                    v.c.name == row["name"], v.c.version == row["version"], v.c.variant == variant
                )
            ).first()
            if taken is not None:
                raise ConflictError(
                    f"{row['name']}:{row['version']} already has a variant {variant}; name this one otherwise"
                )
            if base is None:
                c.execute(sa.insert(models).values(**row, portable=False))
            out = {
                "sha256": row["sha256"],
                "name": row["name"],
                "version": row["version"],
                "variant": variant,
                "target": target,
                "size": row["size"],
                "pushed_at": row["pushed_at"],
            }
            c.execute(sa.insert(v).values(**out))
            return out, True

    def of(self, name: str, version: str) -> list[Row]:
        v = model_variants
        q = sa.select(v).where(v.c.name == name, v.c.version == version).order_by(v.c.pushed_at)
        with self.store.engine.connect() as c:
            return [dict(r) for r in c.execute(q).mappings()]

    def by_sha(self, sha256: str) -> Row | None:
        with self.store.engine.connect() as c:
            row = c.execute(sa.select(model_variants).where(model_variants.c.sha256 == sha256)).mappings().first()
        return dict(row) if row else None

    @staticmethod
    def candidates_in(c: sa.engine.Connection, model: Mapping[str, Any]) -> list[Row]:
        """``candidates`` inside a transaction of the caller's."""
        v = model_variants
        q = sa.select(v).where(v.c.name == model["name"], v.c.version == model["version"]).order_by(v.c.pushed_at)
        out = [dict(r) for r in c.execute(q).mappings()]
        if model.get("portable", True):
            out.append({"variant": "", "sha256": model["sha256"], "target": {}, "size": model["size"]})
        return out

    def candidates(self, model: Row) -> list[Row]:
        """Every artifact a device may get of this version: the targeted ones, then the portable one."""
        out = self.of(model["name"], model["version"])  # a targeted-only version's first one is among them
        if model.get("portable", True):
            out.append({"variant": "", "sha256": model["sha256"], "target": {}, "size": model["size"]})
        return out
