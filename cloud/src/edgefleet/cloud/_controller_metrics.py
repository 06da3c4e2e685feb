"""The controller's own figures on ``/metrics`` (beside the telemetry ingest's, ``_metrics.IngestCollector``):
gRPC requests and their latency by method and code, connected agents, devices by derived health, rollouts
by state, database call latency, per device the telemetry lag and the acknowledgement lag, and the gates
that failed each member of the current rollouts (:func:`failed_gates`).

Prometheus conventions: ``_total`` counters, histograms in seconds, bounded labels (the gRPC methods of the
two services, the fixed status codes, the store's own operations, the rollout and health states; per
device only the lag gauges, one series per device)."""

from __future__ import annotations

import asyncio
import logging
import platform
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import grpc
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ._camera_health import HEALTH_STATES, device_health, not_streaming
from ._rollouts import FAILED_PREFIX

__all__ = ["ControllerCollector", "ControllerMetrics", "RpcMetricsInterceptor", "controller_version", "failed_gates"]

_log = logging.getLogger(__name__)

ROLLOUT_STATES = ("running", "paused", "completed", "aborted", "rolled_back")
#: a model-quality KPI as the gates name it in a member's message: ``shadow_f1 0.000 < min_shadow_f1 0.7``
_KPI = re.compile(r"\b((?:shadow|quality)_[a-z0-9_]+) [-+]?\d")
_RUNTIME_GATES = (
    (re.compile(r" fps < "), "min_fps"),
    (re.compile(r"\bp95 [\d.]+ ms > "), "max_latency_ms"),
    (re.compile(r"\bcamera"), "cameras"),
    (re.compile(r"\bgolden\b|\bnon-finite\b|\bNaN\b"), "outputs"),
)
_RPC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def failed_gates(message: str) -> list[str]:
    """The gates a failed member's message names, in order: the model-quality KPIs (``shadow_f1``,
    ``shadow_class_mix_shift``, ``quality_detection_rate_change``, ...), else the runtime gate
    (``min_fps``, ``max_latency_ms``, ``cameras``, ``outputs``), else ``other`` — a bounded label set."""
    kpis = list(dict.fromkeys(_KPI.findall(message)))
    if kpis:
        return kpis
    return [next((gate for pattern, gate in _RUNTIME_GATES if pattern.search(message)), "other")]


class ControllerMetrics:
    """The counters and histograms the controller updates as it works, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.rpc_requests = Counter(
            "edgefleet_controller_rpc_requests",
            "gRPC calls handled, by service, method and status code",
            ["service", "method", "code"],
            registry=registry,
        )
        self.rpc_seconds = Histogram(
            "edgefleet_controller_rpc_duration_seconds",
            "gRPC call duration (for streams: the stream's whole life)",
            ["service", "method"],
            buckets=_RPC_BUCKETS,
            registry=registry,
        )
        self.db_seconds = Histogram(
            "edgefleet_controller_db_call_duration_seconds",
            "database calls, by store operation, including the wait for a pool thread",
            ["operation"],
            registry=registry,
        )

    def observe_db(self, operation: str, seconds: float) -> None:
        self.db_seconds.labels(operation).observe(seconds)


def _split(method: str) -> tuple[str, str]:
    """``/edgefleet.proto.v1.FleetService/ListDevices`` -> (``FleetService``, ``ListDevices``)."""
    service, _, name = method.strip("/").rpartition("/")
    return service.rpartition(".")[2] or "unknown", name or "unknown"


def _code(context: Any, failed: BaseException | None) -> str:
    code = None
    try:
        code = context.code()
    except Exception:
        code = None
    if code is None:
        if isinstance(failed, asyncio.CancelledError):
            return "CANCELLED"  # the client went away (an agent's stream at its restart)
        return "UNKNOWN" if failed is not None and not isinstance(failed, StopAsyncIteration) else "OK"
    return str(getattr(code, "name", code))


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Counts and times every call, unary or streaming, without touching what it does."""

    def __init__(self, metrics: ControllerMetrics) -> None:
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        service, method = _split(handler_call_details.method)
        record = self._recorder(service, method)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _unary(handler.unary_unary, record),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _unary(handler.stream_unary, record),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _streaming(handler.unary_stream, record),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                _streaming(handler.stream_stream, record),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _recorder(self, service: str, method: str) -> Callable[[Any, float, BaseException | None], None]:
        def record(context: Any, started: float, failed: BaseException | None) -> None:
            self.metrics.rpc_seconds.labels(service, method).observe(time.perf_counter() - started)
            self.metrics.rpc_requests.labels(service, method, _code(context, failed)).inc()

        return record


def _unary(behavior: Any, record: Callable[[Any, float, BaseException | None], None]) -> Any:
    async def wrapped(request: Any, context: Any) -> Any:
        started, failed = time.perf_counter(), None
        try:
            return await behavior(request, context)
        except BaseException as exc:
            failed = exc
            raise
        finally:
            record(context, started, failed)

    return wrapped


def _streaming(behavior: Any, record: Callable[[Any, float, BaseException | None], None]) -> Any:
    async def wrapped(request: Any, context: Any) -> Any:
        started, failed = time.perf_counter(), None
        try:
            async for item in behavior(request, context):
                yield item
        except BaseException as exc:
            failed = exc
            raise
        finally:
            record(context, started, failed)

    return wrapped


def controller_version() -> str:
    """The installed edgefleet-cloud version ("" when run from a tree that is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edgefleet-cloud")
    except PackageNotFoundError:
        return ""


class ControllerCollector(Collector):
    """Read at scrape time (the metrics server's thread): the hub, the fleet store and the telemetry tables.

    ``connected()``: device ids with a stream on this replica; ``engine``: the controller's database;
    ``camera_grace_s`` and ``stale_s`` as the controller uses them for ``devices ls``."""

    def __init__(
        self,
        connected: Callable[[], list[str]],
        engine: sa.Engine,
        *,
        replica: str,
        version: str,
        camera_grace_s: float,
        stale_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._connected = connected
        self._engine = engine
        self._replica = replica
        self._version = version
        self._grace = camera_grace_s
        self._stale = stale_s
        self._clock = clock

    def collect(self) -> Iterator[Any]:
        build = GaugeMetricFamily(
            "edgefleet_build_info", "the controller's build: 1", labels=["component", "version", "python"]
        )
        build.add_metric(["controller", self._version, platform.python_version()], 1.0)
        yield build
        agents = GaugeMetricFamily(
            "edgefleet_controller_connected_agents", "agent streams open on this replica", labels=["replica"]
        )
        agents.add_metric([self._replica], float(len(self._connected())))
        yield agents
        try:
            yield from self._from_database()
        except sa.exc.SQLAlchemyError as exc:  # a scrape must not fail for it: the db latency shows it
            _log.warning("metrics: database not readable: %s", str(exc).splitlines()[0])

    def _from_database(self) -> Iterator[Any]:
        from ._db import devices, rollout_devices, rollouts
        from ._telemetry._schema import devices as telemetry_devices

        now = self._clock()
        with self._engine.connect() as c:
            by_state: dict[str, int] = dict(
                c.execute(sa.select(rollouts.c.state, sa.func.count()).group_by(rollouts.c.state)).all()
            )
            rows = c.execute(
                sa.select(
                    devices.c.device_id, devices.c.online, devices.c.last_seen, devices.c.pipelines, devices.c.health_at
                )
            ).all()
            lags = c.execute(
                sa.select(
                    telemetry_devices.c.device_id,
                    telemetry_devices.c.fleet,
                    telemetry_devices.c.last_seen,
                    telemetry_devices.c.last_seq,
                    telemetry_devices.c.acked_seq,
                )
            ).all()
            # the running rollouts and the newest one: a bounded set of series, gone when a rollout is old
            current = set(
                c.execute(sa.select(rollouts.c.rollout_id).where(rollouts.c.state.in_(("running", "paused"))))
                .scalars()
                .all()
            )
            newest = c.execute(
                sa.select(rollouts.c.rollout_id).order_by(rollouts.c.created_at.desc()).limit(1)
            ).scalar()
            current.update([newest] if newest else [])
            failed = c.execute(
                sa.select(rollout_devices.c.rollout_id, rollout_devices.c.device_id, rollout_devices.c.message)
                .where(
                    (rollout_devices.c.state == "failed")
                    | rollout_devices.c.message.startswith(FAILED_PREFIX)  # rolled back after its own failure
                )
                .where(rollout_devices.c.rollout_id.in_(sorted(current)))
            ).all()
        yield _gate_failures(failed)
        ro = GaugeMetricFamily("edgefleet_controller_rollouts", "rollouts by state", labels=["state"])
        for state in sorted({*ROLLOUT_STATES, *by_state}):
            ro.add_metric([state], float(by_state.get(state, 0)))
        yield ro
        yield from self._device_health(rows, now)
        telemetry_age = GaugeMetricFamily(
            "edgefleet_device_telemetry_age_seconds",
            "seconds since the controllers last received telemetry from the device",
            labels=["fleet", "device"],
        )
        ack_lag = GaugeMetricFamily(
            "edgefleet_device_telemetry_unacknowledged_messages",
            "messages the device sent that are not yet acknowledged as stored (its spool holds them)",
            labels=["fleet", "device"],
        )
        for device_id, fleet, last_seen, last_seq, acked in lags:
            telemetry_age.add_metric([fleet, device_id], max(0.0, now - float(last_seen or 0.0)))
            ack_lag.add_metric([fleet, device_id], float(max(0, int(last_seq or 0) - int(acked or 0))))
        yield from (telemetry_age, ack_lag)

    def _device_health(self, rows: Sequence[Any], now: float) -> Iterator[Any]:
        counts = dict.fromkeys(HEALTH_STATES, 0)
        up = GaugeMetricFamily(
            "edgefleet_device_up", "1 when the device is connected and not down (a camera streams)", labels=["device"]
        )
        cameras = GaugeMetricFamily(
            "edgefleet_device_cameras_not_streaming",
            "the device's cameras not streaming for longer than the camera grace",
            labels=["device"],
        )
        for device_id, online, last_seen, pipelines, health_at in rows:
            pipes = pipelines if isinstance(pipelines, list) else []
            connected = bool(online) and now - float(last_seen or 0.0) < self._stale
            reported = float(health_at or 0.0) > 0
            state, _ = device_health(pipes, online=connected, reported=reported, grace_s=self._grace)
            counts[state] = counts.get(state, 0) + 1
            up.add_metric([device_id], float(state in ("ok", "degraded")))
            cameras.add_metric([device_id], float(len(not_streaming(pipes, self._grace)) if connected else 0))
        by_health = GaugeMetricFamily("edgefleet_controller_devices", "devices by derived health", labels=["health"])
        for state, n in counts.items():
            by_health.add_metric([state], float(n))
        yield from (by_health, up, cameras)


def _gate_failures(rows: Sequence[Any]) -> GaugeMetricFamily:
    """1 per (rollout, device, gate) for the failed members of the running rollouts and of the newest one."""
    g = GaugeMetricFamily(
        "edgefleet_rollout_member_gate_failed",
        "1 for each gate that failed a device in a running rollout or the newest one (the KPI by name)",
        labels=["rollout", "device", "gate"],
    )
    for rollout_id, device_id, message in rows:
        for gate in failed_gates(str(message or "")):
            g.add_metric([rollout_id, device_id, gate], 1.0)
    return g
