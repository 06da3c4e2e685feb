"""A synchronous client of FleetService for the CLI and scripts: every call has a deadline, and gRPC
errors become CloudError subclasses with one readable line."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc

from edgefleet.proto.v1 import fleet_pb2, fleet_pb2_grpc
from edgefleet.sdk.kit import connect_problem, host_port_problem

from ._errors import (
    CloudError,
    ConflictError,
    ControllerUnavailableError,
    InvalidArgumentError,
    NotFoundError,
)
from ._shadow_gates import SHADOW_FIELDS

__all__ = ["DEFAULT_CONTROLLER", "FleetClient"]

DEFAULT_CONTROLLER = "127.0.0.1:50051"
PUSH_CHUNK = 1 << 20
_ACTIONS = {
    "pause": fleet_pb2.ControlRolloutRequest.ACTION_PAUSE,
    "resume": fleet_pb2.ControlRolloutRequest.ACTION_RESUME,
    "abort": fleet_pb2.ControlRolloutRequest.ACTION_ABORT,
    "rollback": fleet_pb2.ControlRolloutRequest.ACTION_ROLLBACK,
}


class FleetClient:
    """``FleetClient("127.0.0.1:50051").list_devices()``; use as a context manager to close the channel."""

    def __init__(
        self,
        address: str = DEFAULT_CONTROLLER,
        *,
        timeout_s: float = 15.0,
        tls_ca: Path | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        token: str | None = None,
        server_name: str | None = None,
    ) -> None:
        """``tls_ca`` turns TLS on (the controller's certificate must chain to it); ``tls_cert`` and
        ``tls_key`` are an admin certificate; ``token`` an admin token sent as a bearer credential."""
        problem = host_port_problem(address)
        if problem:
            raise InvalidArgumentError(f"controller address {problem}")
        self.address = address
        self.timeout_s = timeout_s
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", 4 << 20),
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.enable_retries", 1),
        ]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if tls_ca is not None:
            try:
                creds = grpc.ssl_channel_credentials(
                    tls_ca.read_bytes(),
                    tls_key.read_bytes() if tls_key else None,
                    tls_cert.read_bytes() if tls_cert else None,
                )
            except OSError as exc:
                raise CloudError(f"cannot read TLS file {exc.filename}: {exc.strerror}") from None
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = fleet_pb2_grpc.FleetServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> FleetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: Callable[..., Any], request: Any, timeout_s: float | None = None) -> Any:
        try:
            return fn(request, timeout=timeout_s or self.timeout_s, wait_for_ready=False, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise self._translate(exc) from None

    def _translate(self, exc: grpc.RpcError) -> CloudError:  # noqa: PLR0911
        code = exc.code() if hasattr(exc, "code") else None
        details = (exc.details() if hasattr(exc, "details") else "") or str(code)
        if code == grpc.StatusCode.UNAVAILABLE:
            return self._unreachable(details)
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return CloudError(f"the controller at {self.address} refused the credentials: {details}")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            why = connect_problem(self.address, min(2.0, self.timeout_s))  # a black hole, or a slow controller
            if why:
                return ControllerUnavailableError(f"cannot reach the controller at {self.address}: {why}")
            return ControllerUnavailableError(f"the controller at {self.address} did not answer in time")
        if code == grpc.StatusCode.NOT_FOUND:
            return NotFoundError(details)
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            return ConflictError(details)
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
            return InvalidArgumentError(details)
        return CloudError(f"controller error ({code.name if code else 'unknown'}): {details}")

    def _unreachable(self, details: str) -> ControllerUnavailableError:
        """UNAVAILABLE, said the way a user can act on: gRPC's own text is one line about every address it
        tried; a direct connection attempt tells refused, unresolvable and silent hosts apart."""
        why = connect_problem(self.address, min(2.0, self.timeout_s))
        if why is None:  # TCP connects: TLS, or not a gRPC server
            first = details.splitlines()[0] if details else "unavailable"
            return ControllerUnavailableError(f"cannot reach the controller at {self.address}: {first}")
        refused = why.startswith("connection refused")
        hint = "; is `edgefleet controller serve` running, on this port?" if refused else ""
        return ControllerUnavailableError(f"cannot reach the controller at {self.address}: {why}{hint}")

    # --- models ------------------------------------------------------------------------------------
    def push(
        self,
        package: Path,
        *,
        key: Path | None = None,
        progress: Callable[[int, int], None] | None = None,
        target: dict[str, str] | None = None,
        variant: str = "",
    ) -> fleet_pb2.PushModelResponse:
        """Pack (and sign with ``key``) a package folder or tar, and upload it; with ``target`` as a
        per-target artifact of its version (``{soc: orin, jetpack: "6", tensorrt: "10"}``)."""
        from ._pack import pack_package

        with tempfile.TemporaryDirectory(prefix="edgefleet-push-") as tmp:
            path, sha, size = pack_package(package, Path(tmp) / "artifact.tar", key=key)

            def parts() -> Iterator[fleet_pb2.PushModelRequest]:
                header = fleet_pb2.PushHeader(size=size, sha256=sha, target=target or {}, variant=variant)
                yield fleet_pb2.PushModelRequest(header=header)
                sent = 0
                with path.open("rb") as f:
                    while chunk := f.read(PUSH_CHUNK):
                        sent += len(chunk)
                        if progress is not None:
                            progress(sent, size)
                        yield fleet_pb2.PushModelRequest(data=chunk)

            timeout = max(60.0, size / (1 << 20))  # at least 1 MiB/s
            res: fleet_pb2.PushModelResponse = self._call(self._stub.PushModel, parts(), timeout)
            return res

    def list_models(self, name: str = "") -> list[fleet_pb2.Model]:
        return list(self._call(self._stub.ListModels, fleet_pb2.ListModelsRequest(name=name)).models)

    # --- devices -----------------------------------------------------------------------------------
    def list_devices(self, selector: dict[str, str] | None = None) -> list[fleet_pb2.Device]:
        req = fleet_pb2.ListDevicesRequest(selector=selector or {})
        return list(self._call(self._stub.ListDevices, req).devices)

    def get_device(self, device_id: str) -> fleet_pb2.Device:
        dev: fleet_pb2.Device = self._call(self._stub.GetDevice, fleet_pb2.GetDeviceRequest(device_id=device_id))
        return dev

    def set_labels(self, device_id: str, set_: dict[str, str], remove: list[str]) -> fleet_pb2.Device:
        req = fleet_pb2.SetLabelsRequest(device_id=device_id, set=set_, remove=remove)
        dev: fleet_pb2.Device = self._call(self._stub.SetLabels, req)
        return dev

    # --- rollouts ----------------------------------------------------------------------------------
    def deploy(
        self,
        model_ref: str,
        selector: dict[str, str],
        waves: list[str],
        *,
        health_window_s: float = 0.0,
        max_failure_ratio: float = 0.0,
        min_fps: float = 0.0,
        max_latency_ms: float = 0.0,
        request_id: str | None = None,
        shadow: Mapping[str, float] | None = None,
        pipeline_ref: str = "",
        cameras_may_be_down: bool = False,
        camera_grace_s: float = 0.0,
    ) -> fleet_pb2.Rollout:
        """Roll out model ``model_ref`` (name:version), or with ``pipeline_ref`` a pipeline spec
        (``model_ref`` then ""). ``shadow``: shadow gates and sampling by their CreateRolloutRequest names
        (``min_shadow_f1``, ``max_class_mix_shift``, ``max_detection_rate_change``, ``shadow_sample_rate``, ...)."""
        req = fleet_pb2.CreateRolloutRequest(
            model_ref=model_ref,
            pipeline_ref=pipeline_ref,
            selector=selector,
            waves=waves,
            health_window_s=health_window_s,
            max_failure_ratio=max_failure_ratio,
            min_fps=min_fps,
            max_latency_ms=max_latency_ms,
            request_id=request_id or uuid.uuid4().hex,
            cameras_may_be_down=cameras_may_be_down,
            camera_grace_s=camera_grace_s,
        )
        for key, value in (shadow or {}).items():
            if key == "shadow_phase":
                req.shadow_phase = str(value)
                continue
            if key not in SHADOW_FIELDS:
                raise InvalidArgumentError(f"unknown shadow gate {key!r} (one of {', '.join(SHADOW_FIELDS)})")
            setattr(req, key, int(value) if key == "shadow_min_frames" else float(value))
        ro: fleet_pb2.Rollout = self._call(self._stub.CreateRollout, req)
        return ro

    # --- pipeline specs and secrets -----------------------------------------------------------------
    def push_spec(self, document: str) -> fleet_pb2.PushPipelineSpecResponse:
        resp: fleet_pb2.PushPipelineSpecResponse = self._call(
            self._stub.PushPipelineSpec, fleet_pb2.PushPipelineSpecRequest(document=document)
        )
        return resp

    def list_specs(self, name: str = "") -> list[fleet_pb2.PipelineSpecInfo]:
        return list(self._call(self._stub.ListPipelineSpecs, fleet_pb2.ListPipelineSpecsRequest(name=name)).specs)

    def get_spec(self, name: str, version: int = 0) -> fleet_pb2.PipelineSpecInfo:
        req = fleet_pb2.GetPipelineSpecRequest(name=name, version=version)
        info: fleet_pb2.PipelineSpecInfo = self._call(self._stub.GetPipelineSpec, req)
        return info

    def put_secret(self, device_id: str, name: str, sealed: bytes) -> fleet_pb2.SecretInfo:
        req = fleet_pb2.PutSecretRequest(device_id=device_id, name=name, sealed=sealed)
        info: fleet_pb2.SecretInfo = self._call(self._stub.PutSecret, req)
        return info

    def list_secrets(self, device_id: str = "") -> list[fleet_pb2.SecretInfo]:
        return list(self._call(self._stub.ListSecrets, fleet_pb2.ListSecretsRequest(device_id=device_id)).secrets)

    def rollout(self, rollout_id: str = "") -> fleet_pb2.Rollout:
        ro: fleet_pb2.Rollout = self._call(self._stub.GetRollout, fleet_pb2.GetRolloutRequest(rollout_id=rollout_id))
        return ro

    def list_rollouts(self, limit: int = 20) -> list[fleet_pb2.Rollout]:
        return list(self._call(self._stub.ListRollouts, fleet_pb2.ListRolloutsRequest(limit=limit)).rollouts)

    def control(self, rollout_id: str, action: str) -> fleet_pb2.Rollout:
        if action not in _ACTIONS:
            raise InvalidArgumentError(f"unknown action {action!r}")
        req = fleet_pb2.ControlRolloutRequest(rollout_id=rollout_id, action=_ACTIONS[action])
        ro: fleet_pb2.Rollout = self._call(self._stub.ControlRollout, req)
        return ro
