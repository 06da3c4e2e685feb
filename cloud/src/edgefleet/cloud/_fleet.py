"""FleetService: what the CLI calls (models, devices, labels, rollouts)."""
# ruff: noqa: N802  (gRPC method names are the RPC names)

from __future__ import annotations

import asyncio
import functools
import logging
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import grpc
from sqlalchemy.exc import SQLAlchemyError

from edgefleet.proto.v1 import fleet_pb2, fleet_pb2_grpc

from ._agents import AgentHub
from ._artifact_store import ArtifactStore
from ._camera_health import camera_params, telemetry_cameras
from ._convert import device_pb, model_pb, rollout_pb
from ._errors import (
    CloudError,
    ConflictError,
    DatabaseError,
    InvalidArgumentError,
    NotFoundError,
    RegistryError,
)
from ._fleet_store import Row, Store
from ._rollouts import RolloutEngine, new_rollout_id, plan_waves, validate_waves
from ._settings import MAX_WINDOW_S, ControllerSettings
from ._shadow_gates import quality_baselines, shadow_params
from ._spec_rpcs import SpecRPCs
from ._telemetry import DeviceState, TelemetryIngestError, TelemetryStore
from ._variants import VariantStore, check_target, describe, pick_variant

__all__ = ["FleetServicer"]

_log = logging.getLogger(__name__)
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}\Z")
R = TypeVar("R")
_CODES = {
    DatabaseError: grpc.StatusCode.UNAVAILABLE,
    NotFoundError: grpc.StatusCode.NOT_FOUND,
    ConflictError: grpc.StatusCode.FAILED_PRECONDITION,
    InvalidArgumentError: grpc.StatusCode.INVALID_ARGUMENT,
}
_ACTIONS = {
    fleet_pb2.ControlRolloutRequest.ACTION_PAUSE: "pause",
    fleet_pb2.ControlRolloutRequest.ACTION_RESUME: "resume",
    fleet_pb2.ControlRolloutRequest.ACTION_ABORT: "abort",
    fleet_pb2.ControlRolloutRequest.ACTION_ROLLBACK: "rollback",
}
_RPC_BUDGET_S = 30.0


def _unary(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Map CloudError to a status code and bound the handler's time, whatever the client's deadline."""

    @functools.wraps(fn)
    async def wrapper(self: FleetServicer, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> R:
        try:
            return await asyncio.wait_for(fn(self, request, context), _RPC_BUDGET_S)
        except CloudError as exc:
            code = next((c for t, c in _CODES.items() if isinstance(exc, t)), grpc.StatusCode.INTERNAL)
            await context.abort(code, _details(exc))
            raise  # abort raises; this line is for the type checker
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the controller took too long")
            raise

    return wrapper


def _details(exc: Exception) -> str:
    """The error for the client, capped: it travels in a header (16 KiB at most), and an error that
    quotes a 3 MB id would turn NOT_FOUND into RESOURCE_EXHAUSTED."""
    text = str(exc)
    return text if len(text) <= 1000 else text[:1000] + "… (cut)"


def _check_labels(labels: dict[str, str], what: str) -> None:
    for k, v in labels.items():
        if not _LABEL_RE.match(k) or not (v == "" or _LABEL_RE.match(v)):
            raise InvalidArgumentError(f"{what}: {k}={v} is not a valid label (letters, digits, . _ / -)")


class FleetServicer(fleet_pb2_grpc.FleetServiceServicer):
    def __init__(
        self,
        store: Store,
        artifacts: ArtifactStore,
        hub: AgentHub,
        engine: RolloutEngine,
        settings: ControllerSettings,
        telemetry: TelemetryStore | None = None,
    ) -> None:
        self.telemetry = telemetry  # read for `devices ls|show` whenever given
        self.store = store
        self.artifacts = artifacts
        self.hub = hub
        self.engine = engine
        self.settings = settings
        self.specs_rpc = SpecRPCs(store)
        self.variants = VariantStore(store)

    def _online(self, r: Row) -> bool:
        return bool(r["online"]) and self.store.clock() - r["last_seen"] < self.settings.stale_s

    async def _telemetry_states(self, device_id: str | None = None) -> dict[str, DeviceState]:
        """Telemetry per device id; empty when there is none (or it cannot be read: status reports remain)."""
        if self.telemetry is None:
            return {}
        try:
            states = await asyncio.to_thread(self.telemetry.devices, device_id=device_id)
        except (TelemetryIngestError, SQLAlchemyError) as exc:
            _log.warning("telemetry not readable for devices: %s", exc)
            return {}
        return {t.device_id: t for t in states}

    async def _device_pb(self, r: Row) -> fleet_pb2.Device:
        tel = await self._telemetry_states(r["device_id"])
        msg = device_pb(r, online=self._online(r), telemetry=tel.get(r["device_id"]))
        msg.sealing_key = await self.specs_rpc.device_key(r["device_id"])
        return msg
        grace = self.settings.camera_grace_s
        cameras = await self._telemetry_cameras(r["device_id"]) if r["device_id"] in tel else []
        return device_pb(
            r,
            online=self._online(r),
            telemetry=tel.get(r["device_id"]),
            camera_grace_s=grace,
            telemetry_cameras=cameras,
        )

    async def _telemetry_cameras(self, device_id: str) -> list[dict[str, Any]]:
        """The cameras of the device's newest telemetry message of the last 10 minutes (MQTT)."""
        if self.telemetry is None:
            return []
        try:
            rows = await asyncio.to_thread(
                self.telemetry.recent, device_id, timedelta(minutes=10), kind="telemetry", limit=1
            )
        except (TelemetryIngestError, SQLAlchemyError) as exc:
            _log.warning("telemetry not readable for %s: %s", device_id, exc)
            return []
        return telemetry_cameras(rows[-1]["message"]) if rows else []

    async def PushModel(
        self,
        request_iterator: AsyncIterator[fleet_pb2.PushModelRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> fleet_pb2.PushModelResponse:
        upload = None
        try:
            async for part in request_iterator:
                if part.WhichOneof("part") == "header":
                    if upload is not None:
                        raise InvalidArgumentError("only one PushHeader per push")
                    h = part.header
                    if not 0 < h.size <= self.settings.max_artifact_bytes:
                        raise RegistryError(
                            f"artifact size {h.size} outside 1..{self.settings.max_artifact_bytes} bytes"
                        )
                    upload = self.artifacts.begin(h.size, h.sha256)
                elif upload is None:
                    raise InvalidArgumentError("the first message of a push must be a PushHeader")
                else:
                    upload.write(part.data)
            if upload is None:
                raise InvalidArgumentError("empty push")
            upload.finish()
            row = await asyncio.to_thread(
                self.artifacts.inspect,
                upload,
                self.settings.trusted_keys,
                self.settings.allow_unsigned,
                self.settings.revoked_keys,
            )
            row["pushed_at"] = self.store.clock()
            if h.target:  # a per-target artifact of the version (edgefleet.cloud._variants)
                variant, created = await self.store.call(
                    self.variants.add, row, check_target(dict(h.target)), h.variant
                )
                stored = await self.store.call(self.store.model_by_ref, f"{row['name']}:{row['version']}")
                _log.info("variant %s of %s:%s registered", variant["variant"], row["name"], row["version"])
            else:
                stored, created = await self.store.call(self.store.add_model, row)
            if created or not await asyncio.to_thread(self.artifacts.intact, upload.sha256, upload.size):
                self.artifacts.commit(upload)  # new, or repairs a damaged copy with the pushed bytes
                _log.info("registered %s:%s (%s)", row["name"], row["version"], row["sha256"][:12])
            return fleet_pb2.PushModelResponse(model=model_pb(stored), created=created)
        except CloudError as exc:
            code = next((c for t, c in _CODES.items() if isinstance(exc, t)), grpc.StatusCode.INTERNAL)
            await context.abort(code, _details(exc))
            raise
        finally:
            if upload is not None:
                upload.discard()

    @_unary
    async def ListModels(self, request: fleet_pb2.ListModelsRequest, context: Any) -> fleet_pb2.ListModelsResponse:
        rows = await self.store.call(self.store.list_models, request.name)
        out = []
        for r in rows:
            msg = model_pb(r)
            msg.portable = bool(r.get("portable", True))
            for v in await self.store.call(self.variants.of, r["name"], r["version"]):
                msg.variants.add(variant=v["variant"], sha256=v["sha256"], size=v["size"], target=v["target"])
            out.append(msg)
        return fleet_pb2.ListModelsResponse(models=out)

    @_unary
    async def ListDevices(self, request: fleet_pb2.ListDevicesRequest, context: Any) -> fleet_pb2.ListDevicesResponse:
        rows = await self.store.call(self.store.list_devices, dict(request.selector))
        tel = await self._telemetry_states()
        return fleet_pb2.ListDevicesResponse(
            devices=[
                device_pb(
                    r,
                    online=self._online(r),
                    telemetry=tel.get(r["device_id"]),
                    camera_grace_s=self.settings.camera_grace_s,
                )
                for r in rows
            ]
        )

    @_unary
    async def GetDevice(self, request: fleet_pb2.GetDeviceRequest, context: Any) -> fleet_pb2.Device:
        r = await self.store.call(self.store.get_device, request.device_id)
        return await self._device_pb(r)

    @_unary
    async def SetLabels(self, request: fleet_pb2.SetLabelsRequest, context: Any) -> fleet_pb2.Device:
        _check_labels(dict(request.set), "labels")
        r = await self.store.call(self.store.set_labels, request.device_id, dict(request.set), list(request.remove))
        joined = await self.store.call(self.store.join_rollouts, request.device_id)
        if joined:
            _log.info("device %s joins rollout(s) %s: its new labels match", request.device_id, ", ".join(joined))
            self.hub.notify(request.device_id)
            self.engine.wake()
            r = await self.store.call(self.store.get_device, request.device_id)
        return await self._device_pb(r)

    @_unary
    async def CreateRollout(self, request: fleet_pb2.CreateRolloutRequest, context: Any) -> fleet_pb2.Rollout:
        if request.pipeline_ref and request.model_ref:
            raise InvalidArgumentError("a rollout deploys a model or a pipeline spec, not both")
        name, _, version = (request.pipeline_ref or request.model_ref).partition(":")
        if not name or not version:
            what = "pipeline spec" if request.pipeline_ref else "model"
            raise InvalidArgumentError(
                f"{what} must be name:version, got {request.pipeline_ref or request.model_ref!r}"
            )
        selector = dict(request.selector)
        _check_labels(selector, "selector")
        waves = validate_waves(list(request.waves) or ["100%"])
        if not 0.0 <= request.max_failure_ratio < 1.0:  # NaN fails this too
            raise InvalidArgumentError("max failure ratio must be in [0, 1)")
        if not 0.0 <= request.health_window_s <= MAX_WINDOW_S:
            raise InvalidArgumentError(f"health window must be 0..{MAX_WINDOW_S:.0f} seconds")
        gates = (("min fps", request.min_fps), ("max latency", request.max_latency_ms))
        for what, value in (*gates, ("camera grace", request.camera_grace_s)):
            if not (math.isfinite(value) and value >= 0):  # 0: no such gate
                raise InvalidArgumentError(f"{what} must be a number >= 0 (0: not checked), got {value}")
        shadow = shadow_params(request)
        if request.pipeline_ref:
            if shadow:
                raise InvalidArgumentError("shadow gates judge a model version; a pipeline spec rollout takes none")
            model = await self.specs_rpc.spec_target(request.pipeline_ref)
        else:
            model = await self.store.call(self.store.model_by_ref, request.model_ref)
        devs = await self.store.call(self.store.list_devices, selector)
        if not devs:
            sel = ",".join(f"{k}={v}" for k, v in selector.items()) or "(everything)"
            raise InvalidArgumentError(f"no device matches {sel} (see `edgefleet devices ls`)")
        devs.sort(key=lambda d: (not self._online(d), d["device_id"]))
        plan = plan_waves(len(devs), waves)
        choices = [] if request.pipeline_ref else await self.store.call(self.variants.candidates, model)
        targeted = any(c["variant"] for c in choices)  # the version has per-target artifacts
        now = self.store.clock()
        rid = new_rollout_id()
        members = []
        for d, wave in zip(devs, plan, strict=True):
            prev: Row = next(
                (p for p in d["pipelines"] if str(p.get("model_ref", "")).split(":")[0] == model["name"]), {}
            )
            member = {
                "rollout_id": rid,
                "device_id": d["device_id"],
                "wave": wave,
                "state": "pending",
                "previous_ref": prev.get("model_ref", ""),
                "previous_sha": prev.get("model_sha256", ""),
                "command_id": "",
                "swapped_at": 0.0,
                "message": "",
                "updated_at": now,
                "variant": "",
                "variant_sha": "",
            }
            if targeted:
                pick = pick_variant(choices, d["capabilities"])
                if pick is None:  # reported, never skipped in silence: it counts as its wave's failure
                    caps = describe(d["capabilities"])
                    member.update(state="failed", message=f"no artifact of {request.model_ref} matches it ({caps})")
                else:
                    member.update(variant=pick["variant"] or "portable", variant_sha=pick["sha256"])
            members.append(member)
        params = {
            "health_window_s": request.health_window_s or self.settings.default_health_window_s,
            "max_failure_ratio": request.max_failure_ratio,
            "min_fps": request.min_fps,
            "max_latency_ms": request.max_latency_ms,
            **shadow,
            **camera_params(request.cameras_may_be_down, request.camera_grace_s),
            **quality_baselines(shadow, devs, model["name"]),
        }
        row = {
            "rollout_id": rid,
            "request_id": request.request_id or None,
            "model_name": model["name"],
            "model_ref": f"{model['name']}:{model['version']}",
            "sha256": model["sha256"],
            "selector": selector,
            "waves": waves,
            "params": params,
            "state": "running",
            "current_wave": 0,
            "message": "starting wave 1",
            "created_at": now,
            "updated_at": now,
            "lease_owner": "",
            "lease_until": 0.0,
        }
        ro, created = await self.store.call(self.store.create_rollout, row, members)
        if created:
            _log.info("rollout %s: %s to %d device(s) in waves %s", rid, row["model_ref"], len(devs), waves)
            self.engine.wake()
        return rollout_pb(ro)

    @_unary
    async def GetRollout(self, request: fleet_pb2.GetRolloutRequest, context: Any) -> fleet_pb2.Rollout:
        return rollout_pb(await self.store.call(self.store.get_rollout, request.rollout_id))

    @_unary
    async def ListRollouts(
        self, request: fleet_pb2.ListRolloutsRequest, context: Any
    ) -> fleet_pb2.ListRolloutsResponse:
        rows = await self.store.call(self.store.list_rollouts, request.limit or 20)
        return fleet_pb2.ListRolloutsResponse(rollouts=[rollout_pb(r) for r in rows])

    # --- pipeline specs and secrets (edgefleet.cloud._spec_rpcs) --------------------------------------
    @_unary
    async def PushPipelineSpec(
        self, request: fleet_pb2.PushPipelineSpecRequest, context: Any
    ) -> fleet_pb2.PushPipelineSpecResponse:
        return await self.specs_rpc.push(request)

    @_unary
    async def ListPipelineSpecs(
        self, request: fleet_pb2.ListPipelineSpecsRequest, context: Any
    ) -> fleet_pb2.ListPipelineSpecsResponse:
        return await self.specs_rpc.list(request)

    @_unary
    async def GetPipelineSpec(
        self, request: fleet_pb2.GetPipelineSpecRequest, context: Any
    ) -> fleet_pb2.PipelineSpecInfo:
        return await self.specs_rpc.get(request)

    @_unary
    async def PutSecret(self, request: fleet_pb2.PutSecretRequest, context: Any) -> fleet_pb2.SecretInfo:
        info = await self.specs_rpc.put_secret(request)
        self.hub.notify(request.device_id)
        return info

    @_unary
    async def ListSecrets(self, request: fleet_pb2.ListSecretsRequest, context: Any) -> fleet_pb2.ListSecretsResponse:
        return await self.specs_rpc.list_secrets(request)

    @_unary
    async def ControlRollout(self, request: fleet_pb2.ControlRolloutRequest, context: Any) -> fleet_pb2.Rollout:
        action = _ACTIONS.get(request.action)
        if action is None:
            raise InvalidArgumentError("action must be pause, resume, abort or rollback")
        rid = request.rollout_id or (await self.store.call(self.store.get_rollout, ""))["rollout_id"]
        ro, touched = await self.store.call(self.engine.control, rid, action)
        for device_id in touched:
            self.hub.notify(device_id)
        self.engine.wake()
        _log.info("rollout %s: %s by operator", rid, action)
        return rollout_pb(ro)
