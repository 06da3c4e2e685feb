"""The controller's pipeline specs, device sealing keys and sealed camera secrets (tables of migration
10). Synchronous, one transaction each, called through ``Store.call`` like the rest of the store.

Specs are immutable: a name's version, once pushed, keeps its document (pushing the same document again
is a no-op; another document under a taken version is a conflict). Secrets are stored only as the
ciphertext the operator's CLI sealed to one device's key (``edgefleet.sdk._sealing``): the controller
cannot open them, and hands a device only the ones sealed to it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

import sqlalchemy as sa

from edgefleet.sdk import ConfigError
from edgefleet.sdk.kit import NAME_RE, PipelineSpec, load_pipeline_spec, secret_refs

from ._db import desired, device_keys, pipeline_specs, rollout_devices, sealed_secrets
from ._errors import ConflictError, InvalidArgumentError, NotFoundError
from ._fleet_store import Row, Store

__all__ = ["SPEC_PREFIX", "SpecStore", "parse_spec_ref", "spec_model_name"]

SPEC_PREFIX = "spec/"
MAX_DOCUMENT = 512 * 1024
MAX_SEALED = 8192


def spec_model_name(name: str) -> str:
    """What a spec's rollouts and desired rows are keyed by (never a model name: those have no ``/``)."""
    return SPEC_PREFIX + name


def parse_spec_ref(ref: str) -> tuple[str, int]:
    """``site-a:3`` -> ("site-a", 3); ``site-a`` or ``site-a:latest`` -> ("site-a", 0), the newest."""
    name, _, version = ref.removeprefix(SPEC_PREFIX).partition(":")
    if not NAME_RE.match(name):
        raise InvalidArgumentError(f"pipeline spec must be name[:version], got {ref!r}")
    if version in ("", "latest"):
        return name, 0
    if not version.isdigit() or int(version) < 1:
        raise InvalidArgumentError(f"a pipeline spec version is a number >= 1, got {version!r}")
    return name, int(version)


class SpecStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def engine(self) -> sa.engine.Engine:
        return self.store.engine

    # --- specs ---------------------------------------------------------------------------------------
    @staticmethod
    def validate(text: str) -> PipelineSpec:
        if len(text.encode()) > MAX_DOCUMENT:
            raise InvalidArgumentError(f"a pipeline spec is at most {MAX_DOCUMENT // 1024} KiB")
        try:
            return load_pipeline_spec(text, "pipeline spec")
        except ConfigError as exc:
            raise InvalidArgumentError(str(exc)) from None

    def push(self, spec: PipelineSpec) -> tuple[Row, bool]:
        row = {
            "name": spec.name,
            "version": spec.version,
            "sha256": spec.sha256(),
            "description": spec.description,
            "document": spec.canonical(),
            "pushed_at": self.store.clock(),
        }
        t = pipeline_specs
        with self.engine.begin() as c:
            old = c.execute(sa.select(t).where(t.c.name == spec.name, t.c.version == spec.version)).mappings().first()
            if old is not None:
                if old["sha256"] == row["sha256"]:
                    return dict(old), False
                raise ConflictError(
                    f"pipeline spec {spec.ref} is already pushed with other content ({old['sha256'][:12]}…); "
                    "give it a new version"
                )
            newest = c.execute(sa.select(sa.func.max(t.c.version)).where(t.c.name == spec.name)).scalar()
            if newest is not None and spec.version < newest:
                raise ConflictError(f"pipeline spec {spec.name} is at version {newest}; push {newest + 1} or higher")
            c.execute(sa.insert(t).values(**row))
            return row, True

    def list_specs(self, name: str = "") -> list[Row]:
        t = pipeline_specs
        q = sa.select(t).order_by(t.c.name, t.c.version)
        if name:
            q = q.where(t.c.name == name)
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(q).mappings()]

    def get(self, name: str, version: int = 0) -> Row:
        t = pipeline_specs
        q = sa.select(t).where(t.c.name == name)
        q = q.where(t.c.version == version) if version else q.order_by(t.c.version.desc())
        with self.engine.connect() as c:
            row = c.execute(q.limit(1)).mappings().first()
        if row is None:
            what = f"{name}:{version}" if version else name
            raise NotFoundError(f"pipeline spec {what} is not on the controller (see `edgefleet pipelines ls`)")
        return dict(row)

    def by_sha(self, sha256: str) -> Row | None:
        t = pipeline_specs
        with self.engine.connect() as c:
            row = c.execute(sa.select(t).where(t.c.sha256 == sha256).limit(1)).mappings().first()
        return dict(row) if row else None

    # --- sealing keys and secrets --------------------------------------------------------------------
    def set_device_key(self, device_id: str, public_key_pem: str) -> None:
        t = device_keys
        now = self.store.clock()
        with self.engine.begin() as c:
            old = c.execute(sa.select(t.c.public_key_pem).where(t.c.device_id == device_id)).first()
            if old is None:
                c.execute(sa.insert(t).values(device_id=device_id, public_key_pem=public_key_pem, updated_at=now))
            elif old[0] != public_key_pem:
                c.execute(
                    sa.update(t).where(t.c.device_id == device_id).values(public_key_pem=public_key_pem, updated_at=now)
                )

    def device_key(self, device_id: str) -> str:
        with self.engine.connect() as c:
            row = c.execute(sa.select(device_keys.c.public_key_pem).where(device_keys.c.device_id == device_id)).first()
        return str(row[0]) if row else ""

    def put_secret(self, device_id: str, name: str, sealed: bytes) -> Row:
        if not NAME_RE.match(device_id):
            raise InvalidArgumentError("device_id must match [a-z0-9][a-z0-9._-]{0,63}")
        if not NAME_RE.match(name):
            raise InvalidArgumentError("a secret's name must match [a-z0-9][a-z0-9._-]{0,63}")
        if not sealed.startswith(b"EFS1") or len(sealed) > MAX_SEALED:
            raise InvalidArgumentError(
                "not a sealed secret (seal it with `edgefleet secrets set`, never send it clear)"
            )
        t = sealed_secrets
        row = {
            "device_id": device_id,
            "name": name,
            "sealed": sealed,
            "sha256": hashlib.sha256(sealed).hexdigest(),
            "updated_at": self.store.clock(),
        }
        with self.engine.begin() as c:
            c.execute(sa.delete(t).where(t.c.device_id == device_id, t.c.name == name))
            c.execute(sa.insert(t).values(**row))
        return row

    def list_secrets(self, device_id: str = "") -> list[Row]:
        t = sealed_secrets
        q = sa.select(t.c.device_id, t.c.name, t.c.sha256, t.c.updated_at).order_by(t.c.device_id, t.c.name)
        if device_id:
            q = q.where(t.c.device_id == device_id)
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(q).mappings()]

    def resend_for_secret(self, device_id: str, name: str) -> list[str]:
        """A secret of ``device_id`` changed: every pipeline spec the device was told to run that uses it
        is sent again (a new command id, the same spec), so the device gets the new sealed value and
        replaces the cameras that use it live. Returns the new command ids."""
        out: list[str] = []
        now = self.store.clock()
        with self.engine.begin() as c:
            rows = c.execute(
                sa.select(desired).where(
                    desired.c.device_id == device_id,
                    desired.c.model_name.like(SPEC_PREFIX + "%"),
                    desired.c.state == "applied",
                )
            ).mappings()
            for d in [dict(r) for r in rows]:
                spec_name, version = parse_spec_ref(d["ref"])
                doc = c.execute(
                    sa.select(pipeline_specs.c.document).where(
                        pipeline_specs.c.name == spec_name, pipeline_specs.c.version == version
                    )
                ).scalar()
                if doc is None or name not in secret_refs(load_pipeline_spec(json.loads(doc))):
                    continue
                base = d["command_id"].split(".secret-")[0]
                row = {k: d[k] for k in ("device_id", "model_name", "kind", "sha256", "ref", "rollout_id")}
                row |= {"command_id": f"{base}.secret-{secrets.token_hex(3)}", "health_window_s": 0.0}
                c.execute(sa.delete(desired).where(desired.c.command_id == d["command_id"]))
                c.execute(sa.insert(desired).values(state="pending", message="", updated_at=now, done_at=0.0, **row))
                if d["rollout_id"]:  # the rollout follows its member's newest command
                    c.execute(
                        sa.update(rollout_devices)
                        .where(
                            rollout_devices.c.rollout_id == d["rollout_id"],
                            rollout_devices.c.device_id == device_id,
                            rollout_devices.c.command_id == d["command_id"],
                        )
                        .values(command_id=row["command_id"], updated_at=now)
                    )
                out.append(row["command_id"])
        return out

    def sealed_for(self, device_id: str, names: set[str]) -> dict[str, bytes]:
        """The sealed secrets of ``device_id`` among ``names``: never another device's."""
        if not names:
            return {}
        t = sealed_secrets
        with self.engine.connect() as c:
            rows = c.execute(sa.select(t.c.name, t.c.sealed).where(t.c.device_id == device_id, t.c.name.in_(names)))
            return {str(r[0]): bytes(r[1]) for r in rows}


def spec_summary(row: Row) -> dict[str, Any]:
    doc = json.loads(row["document"])
    pipes = doc.get("pipelines", {})
    return {"pipelines": sorted(pipes), "streams": sum(len(p.get("sources", [])) for p in pipes.values())}
