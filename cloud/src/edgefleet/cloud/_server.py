"""The controller's composition root: database, artifact store, rollout engine and the gRPC server
(AgentService, FleetService and the standard health service), started in order and stopped in reverse."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from edgefleet.proto.v1 import agent_pb2_grpc, fleet_pb2_grpc

from ._agents import AgentHub, AgentServicer
from ._artifact_store import ArtifactStore
from ._errors import CloudError
from ._fleet import FleetServicer
from ._fleet_store import Store
from ._rollouts import RolloutEngine
from ._settings import ControllerSettings
from ._status_writer import StatusWriter
from ._telemetry import Ingester, TelemetryStore, parse_broker_url

__all__ = ["Controller", "server_options", "serve"]

_log = logging.getLogger(__name__)
SERVICES = ("edgefleet.proto.v1.AgentService", "edgefleet.proto.v1.FleetService")


def server_options(settings: ControllerSettings) -> list[tuple[str, Any]]:
    return [
        # gRPC sets SO_REUSEPORT by default: a second controller on the port would start and the kernel
        # would split connections between two registries. Off, binding a port in use fails.
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def port_in_use(listen: str) -> bool:
    """Whether another socket already listens on ``listen`` (``host:port``; port 0 never is).

    Probed with a plain bind (SO_REUSEADDR, as gRPC binds), so the refusal is one clear line instead of
    gRPC's "Failed to bind" and its C-level log line."""
    name, _, port_text = listen.rpartition(":")
    host = name.strip("[]") or None
    port = int(port_text)
    if port == 0:
        return False
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False  # an unresolvable name: gRPC says so
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


def _own_names(s: ControllerSettings) -> frozenset[str]:
    """The names of this controller's own certificates (MQTT and gRPC): no device has them, so telemetry
    under them did not come from a device. Refuses an MQTT certificate of another role, or one issued
    before roles were written into the common name (the broker's ACL would treat it as a device)."""
    from edgefleet.sdk.kit import ROLES, certificate_role

    names: set[str] = set()
    for flag, path in (("--mqtt-cert-file", s.mqtt_cert_file), ("--tls-cert", s.tls.cert if s.tls else None)):
        if path is None:
            continue
        try:
            found = certificate_role(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise CloudError(f"{flag} {path}: not a readable PEM certificate ({exc})") from None
        if flag == "--mqtt-cert-file" and found.role in ROLES and (found.role != "controller" or found.legacy):
            why = (
                "was issued before roles went into the common name; re-issue it"
                if found.legacy
                else f"is a {found.role} certificate ({found.cn}); the controller needs its own"
            )
            raise CloudError(f"{flag} {path} {why}: edgefleet certs issue --controller <name> --force")
        if found.role in ROLES:
            names.add(found.name)
    return frozenset(names)


class Controller:
    """One controller replica. ``async with Controller(settings) as c: await c.wait()``."""

    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings
        self.port = 0
        self._stack = contextlib.AsyncExitStack()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()

    async def start(self) -> Controller:
        s = self.settings
        if port_in_use(s.listen):  # before anything else: a second replica on the port must not start at all
            raise CloudError(f"cannot listen on {s.listen}: the port is in use (another controller or program)")
        try:
            self.store = await asyncio.to_thread(Store, s.db_url)
        except CloudError:
            raise
        self._stack.callback(self.store.close)
        # telemetry_* tables come with the controller's migrations (v3): always readable by `devices ls`
        self.telemetry = TelemetryStore(self.store.engine, create=False)
        self.ingester: Ingester | None = None
        self.artifacts = ArtifactStore(s.artifacts_dir)
        self.hub = AgentHub()
        self.engine = RolloutEngine(
            self.store,
            s.replica_id,
            notify=self.hub.notify,
            tick_s=s.tick_s,
            lease_s=s.lease_s,
            stale_s=s.stale_s,
            telemetry_health=self.telemetry.health if s.mqtt_url else None,
            report_gap_s=s.report_gap_s,
            max_attempts=s.max_attempts,
            retry_backoff_s=s.retry_backoff_s,
            reconcile_s=s.reconcile_s,
            camera_grace_s=s.camera_grace_s,
        )
        from ._auth import Authorizer, server_credentials

        self.status_writer = StatusWriter(self.store)
        interceptors: list[Any] = [Authorizer(s.tls, s.admin_tokens)]
        self._registry: Any = None
        if s.metrics_listen:
            from prometheus_client import CollectorRegistry

            from ._controller_metrics import ControllerMetrics, RpcMetricsInterceptor

            self._registry = CollectorRegistry(auto_describe=False)
            metrics = ControllerMetrics(self._registry)
            self.store.observe = metrics.observe_db
            interceptors.append(RpcMetricsInterceptor(metrics))
        self.server = grpc.aio.server(
            options=server_options(s), maximum_concurrent_rpcs=10_000, interceptors=interceptors
        )
        agent_pb2_grpc.add_AgentServiceServicer_to_server(  # type: ignore[no-untyped-call]
            AgentServicer(self.store, self.artifacts, self.hub, s, self.engine.wake, self.status_writer), self.server
        )
        fleet_pb2_grpc.add_FleetServiceServicer_to_server(  # type: ignore[no-untyped-call]
            FleetServicer(self.store, self.artifacts, self.hub, self.engine, s, self.telemetry), self.server
        )
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        try:
            if s.tls is not None:
                self.port = self.server.add_secure_port(s.listen, server_credentials(s.tls))
            else:
                self.port = self.server.add_insecure_port(s.listen)
        except RuntimeError as exc:
            raise CloudError(f"cannot listen on {s.listen}: {exc}") from None
        if s.replica_id.endswith(":0"):
            s.replica_id = f"{s.replica_id[:-2]}:{self.port}"
            self.engine.owner = s.replica_id
        if s.mqtt_url:
            self._start_ingest()
        if s.metrics_listen:
            from ._controller_metrics import ControllerCollector, controller_version
            from ._metrics import IngestCollector, serve_metrics

            ingester = self.ingester
            collector = IngestCollector(lambda: ingester.stats() if ingester is not None else None)
            own = ControllerCollector(
                self.hub.connected,
                self.store.engine,
                replica=s.replica_id,
                version=controller_version(),
                camera_grace_s=s.camera_grace_s,
                stale_s=s.stale_s,
                clock=self.store.clock,
            )
            self._stack.callback(serve_metrics(collector, s.metrics_listen, self._registry, own))
        forgotten = await self.store.call(self.store.forget_connections, s.replica_id)
        if forgotten:
            _log.info("marked %d device(s) of a previous run offline until they reconnect", forgotten)
        await self.server.start()
        self._stack.push_async_callback(self._stop_server)
        for name in ("", *SERVICES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._tasks = [
            asyncio.create_task(self.engine.run()),
            asyncio.create_task(self._sweep()),
            asyncio.create_task(self.status_writer.run()),
        ]
        self._stack.push_async_callback(self._cancel_tasks)
        _log.info(
            "controller %s listening on %s (db %s, schema v%d)",
            s.replica_id,
            s.listen,
            self.store.engine.dialect.name,
            self.store.version,
        )
        return self

    def _start_ingest(self) -> None:
        """MQTT ingest: a shared subscription (replicas split the load) under a client id stable per replica,
        so the broker keeps this replica's session across its restarts."""
        s = self.settings
        broker = parse_broker_url(
            s.mqtt_url or "", ca_file=s.mqtt_ca_file, cert_file=s.mqtt_cert_file, key_file=s.mqtt_key_file
        )
        self.ingester = Ingester(
            broker,
            self.telemetry,
            client_id=f"edgefleet-ingest-{s.replica_id}",
            fleet=s.mqtt_fleet,
            share_group=s.mqtt_share_group,
            not_devices=_own_names(s),
            replica=s.replica_id,
        )
        self.ingester.start()
        self._stack.callback(self.ingester.stop)
        _log.info("telemetry ingest from %s (%s)", broker.redacted_url, self.ingester.topic)

    async def _stop_server(self) -> None:
        for name in ("", *SERVICES):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(self.settings.grace_s)

    async def _cancel_tasks(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _sweep(self) -> None:
        """Wake streams whose device has a command this replica has not sent (set by another replica)."""
        while True:
            await asyncio.sleep(self.settings.sweep_s)
            try:
                for device_id, command_id in await self.store.call(self.store.all_pending):
                    conn = self.hub.conns.get(device_id)
                    if conn is not None and command_id not in conn.sent:
                        conn.wake.set()
            except Exception:
                _log.exception("pending-command sweep failed; retrying")

    def stop(self) -> None:
        self._stopped.set()

    async def wait(self) -> None:
        await self._stopped.wait()

    async def close(self) -> None:
        await self._stack.aclose()

    async def __aenter__(self) -> Controller:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def serve(settings: ControllerSettings, *, ready: Callable[[Controller], None] | None = None) -> None:
    """Run a controller until SIGINT/SIGTERM (blocking)."""

    async def main() -> None:
        async with Controller(settings) as controller:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, controller.stop)
            if ready is not None:
                ready(controller)
            await controller.wait()
            _log.info("controller stopping")

    asyncio.run(main())
