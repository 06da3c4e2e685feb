"""The agent side of pipeline specs on the controller: the ApplyPipelineSpec command a desired row of a
spec (``model_name`` ``spec/<name>``) becomes, with the secrets sealed to that device and to no other,
and the sealing key a device proves it holds when it connects over mTLS."""

from __future__ import annotations

import json
import logging
from typing import Any

from edgefleet.proto.v1 import agent_pb2
from edgefleet.sdk.kit import SealingError, load_pipeline_spec, public_key_pem, secret_refs

from ._fleet_store import Row, Store
from ._spec_store import SpecStore, parse_spec_ref

__all__ = ["SpecCommands"]

_log = logging.getLogger(__name__)


class SpecCommands:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.specs = SpecStore(store)

    async def remember_key(self, device_id: str, context: Any) -> None:
        pems = list(context.auth_context().get("x509_pem_cert") or [])
        if not pems:
            return
        try:
            key = public_key_pem(pems[0]).decode()
        except SealingError as exc:
            _log.warning("device %s: no sealing key from its certificate: %s", device_id, exc)
            return
        await self.store.call(self.specs.set_device_key, device_id, key)

    async def command(self, d: Row, device_id: str) -> agent_pb2.ControllerMessage:
        """The ApplyPipelineSpec for desired row ``d`` (an apply, or a rollback to ``d['ref']``)."""
        name, version = parse_spec_ref(d["ref"])
        row = await self.store.call(self.specs.get, name, version)
        spec = load_pipeline_spec(json.loads(row["document"]), f"pipeline spec {row['name']}:{row['version']}")
        sealed = await self.store.call(self.specs.sealed_for, device_id, secret_refs(spec))
        cmd = agent_pb2.Command(command_id=d["command_id"], rollout_id=d["rollout_id"])
        cmd.spec.CopyFrom(
            agent_pb2.ApplyPipelineSpec(
                name=row["name"],
                version=row["version"],
                sha256=row["sha256"],
                document=row["document"],
                health_window_s=d["health_window_s"],
                rollback=d["kind"] == "rollback",
                sealed_secrets=sealed,
            )
        )
        return agent_pb2.ControllerMessage(command=cmd)
