"""The FleetService calls for pipeline specs and sealed secrets (``FleetServicer`` delegates here)."""

from __future__ import annotations

import logging

from edgefleet.proto.v1 import fleet_pb2

from ._fleet_store import Row, Store
from ._spec_store import SpecStore, parse_spec_ref, spec_model_name, spec_summary

__all__ = ["SpecRPCs", "spec_info_pb"]

_log = logging.getLogger(__name__)


def spec_info_pb(row: Row, *, document: bool = True) -> fleet_pb2.PipelineSpecInfo:
    summary = spec_summary(row)
    return fleet_pb2.PipelineSpecInfo(
        name=row["name"],
        version=row["version"],
        sha256=row["sha256"],
        description=row["description"],
        pushed_at=row["pushed_at"],
        document=row["document"] if document else "",
        pipelines=summary["pipelines"],
        streams=summary["streams"],
    )


class SpecRPCs:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.specs = SpecStore(store)

    async def push(self, request: fleet_pb2.PushPipelineSpecRequest) -> fleet_pb2.PushPipelineSpecResponse:
        spec = SpecStore.validate(request.document)
        row, created = await self.store.call(self.specs.push, spec)
        if created:
            _log.info("pipeline spec %s pushed (%s)", spec.ref, row["sha256"][:12])
        return fleet_pb2.PushPipelineSpecResponse(spec=spec_info_pb(row), created=created)

    async def list(self, request: fleet_pb2.ListPipelineSpecsRequest) -> fleet_pb2.ListPipelineSpecsResponse:
        rows = await self.store.call(self.specs.list_specs, request.name)
        return fleet_pb2.ListPipelineSpecsResponse(specs=[spec_info_pb(r, document=False) for r in rows])

    async def get(self, request: fleet_pb2.GetPipelineSpecRequest) -> fleet_pb2.PipelineSpecInfo:
        return spec_info_pb(await self.store.call(self.specs.get, request.name, int(request.version)))

    async def spec_target(self, ref: str) -> Row:
        """The rollout target of pipeline spec ``ref``, shaped like a model row (``name`` is its key)."""
        name, version = parse_spec_ref(ref)
        row = await self.store.call(self.specs.get, name, version)
        return {"name": spec_model_name(row["name"]), "version": str(row["version"]), "sha256": row["sha256"]}

    async def device_key(self, device_id: str) -> str:
        return await self.store.call(self.specs.device_key, device_id)

    async def put_secret(self, request: fleet_pb2.PutSecretRequest) -> fleet_pb2.SecretInfo:
        row = await self.store.call(self.specs.put_secret, request.device_id, request.name, bytes(request.sealed))
        _log.info("sealed secret %s stored for %s (%s)", request.name, request.device_id, row["sha256"][:12])
        resent = await self.store.call(self.specs.resend_for_secret, request.device_id, request.name)
        if resent:
            _log.info("%s: spec command(s) %s sent again with the new secret", request.device_id, ", ".join(resent))
        return fleet_pb2.SecretInfo(
            device_id=row["device_id"], name=row["name"], sha256=row["sha256"], updated_at=row["updated_at"]
        )

    async def list_secrets(self, request: fleet_pb2.ListSecretsRequest) -> fleet_pb2.ListSecretsResponse:
        rows = await self.store.call(self.specs.list_secrets, request.device_id)
        return fleet_pb2.ListSecretsResponse(
            secrets=[
                fleet_pb2.SecretInfo(
                    device_id=r["device_id"], name=r["name"], sha256=r["sha256"], updated_at=r["updated_at"]
                )
                for r in rows
            ]
        )
