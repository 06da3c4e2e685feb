"""Bad input on gRPC against a real controller process: oversized messages, unknown enum values, missing
fields, out-of-order stream messages and slow-loris clients are refused with the right status code, and
the controller keeps serving well-behaved clients meanwhile."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from edgefleet.proto.v1 import agent_pb2, agent_pb2_grpc, common_pb2, fleet_pb2, fleet_pb2_grpc
from tests.integration.test_control_plane import EDGEFLEET, free_port, wait_for

pytestmark = [pytest.mark.integration]

HELLO_TIMEOUT_S = 1.5
BIG = 5 << 20  # beyond the controller's 4 MiB message limit


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("ctl")
    address = f"127.0.0.1:{free_port()}"
    args = [
        EDGEFLEET, "controller", "serve", "--insecure", "--allow-unsigned", "--db", f"sqlite:///{root}/c.db",
        "--listen", address, "--data-dir", str(root / "data"), "--hello-timeout", str(HELLO_TIMEOUT_S),
        "--status-interval", "0.5", "--tick", "0.2",
    ]  # fmt: skip
    with (root / "controller.log").open("ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with grpc.insecure_channel(address) as ch:
            stub = fleet_pb2_grpc.FleetServiceStub(ch)
            wait_for("the controller", lambda: stub.ListModels(fleet_pb2.ListModelsRequest(), timeout=2), 30)
        yield address
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert proc.returncode in (0, -signal.SIGTERM), (root / "controller.log").read_text()[-3000:]


@pytest.fixture
def channel(controller: str) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(controller, options=[("grpc.max_send_message_length", -1)]) as ch:
        yield ch


def _code(exc: pytest.ExceptionInfo[grpc.RpcError]) -> grpc.StatusCode:
    code: grpc.StatusCode = exc.value.code()  # type: ignore[attr-defined]
    return code


def _hello(device_id: str, **labels: str) -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(hello=agent_pb2.Hello(device_id=device_id, labels=labels))


class AgentStream:
    """A hand-driven Connect stream: messages go out when put; nothing is sent until then."""

    def __init__(self, channel: grpc.Channel, timeout: float = 20.0) -> None:
        self.out: queue.Queue[agent_pb2.AgentMessage | None] = queue.Queue()
        self.call = agent_pb2_grpc.AgentServiceStub(channel).Connect(self._requests(), timeout=timeout)

    def _requests(self) -> Iterator[agent_pb2.AgentMessage]:
        while (msg := self.out.get()) is not None:
            yield msg

    def send(self, msg: agent_pb2.AgentMessage) -> None:
        self.out.put(msg)

    def first(self) -> Any:
        return next(self.call)

    def close(self) -> None:
        self.out.put(None)
        self.call.cancel()


def _serving(channel: grpc.Channel) -> None:
    """A well-behaved FleetService call still answers."""
    fleet_pb2_grpc.FleetServiceStub(channel).ListModels(fleet_pb2.ListModelsRequest(), timeout=5)


def test_oversized_messages_are_resource_exhausted(channel: grpc.Channel) -> None:
    fleet = fleet_pb2_grpc.FleetServiceStub(channel)
    with pytest.raises(grpc.RpcError) as exc:
        fleet.GetDevice(fleet_pb2.GetDeviceRequest(device_id="x" * BIG), timeout=10)
    assert _code(exc) == grpc.StatusCode.RESOURCE_EXHAUSTED

    s = AgentStream(channel)
    s.send(_hello("big-hello", blob="y" * BIG))
    with pytest.raises(grpc.RpcError) as exc:
        s.first()
    s.close()
    assert _code(exc) == grpc.StatusCode.RESOURCE_EXHAUSTED

    def push() -> Iterator[fleet_pb2.PushModelRequest]:
        yield fleet_pb2.PushModelRequest(header=fleet_pb2.PushHeader(size=BIG, sha256="0" * 64))
        yield fleet_pb2.PushModelRequest(data=b"\0" * BIG)

    with pytest.raises(grpc.RpcError) as exc:
        fleet.PushModel(push(), timeout=10)
    assert _code(exc) == grpc.StatusCode.RESOURCE_EXHAUSTED
    _serving(channel)


def test_unknown_enum_values(channel: grpc.Channel) -> None:
    fleet = fleet_pb2_grpc.FleetServiceStub(channel)
    with pytest.raises(grpc.RpcError) as exc:
        fleet.ControlRollout(fleet_pb2.ControlRolloutRequest(rollout_id="r-1", action=99), timeout=5)  # type: ignore[arg-type]
    assert _code(exc) == grpc.StatusCode.INVALID_ARGUMENT

    # an agent newer than the controller may send a step it does not know: logged by number, the stream
    # stays up (documented tolerance: docs/security.md)
    s = AgentStream(channel)
    s.send(_hello("enum-dev"))
    assert s.first().WhichOneof("body") == "welcome"
    s.send(agent_pb2.AgentMessage(event=agent_pb2.CommandEvent(command_id="c-1", step=99, message="?")))  # type: ignore[arg-type]
    s.send(agent_pb2.AgentMessage(status=agent_pb2.StatusReport(sent_at=time.time())))
    time.sleep(0.5)
    dev = fleet.GetDevice(fleet_pb2.GetDeviceRequest(device_id="enum-dev"), timeout=5)
    assert dev.online
    assert "c-1: step 99" in dev.last_event
    s.close()


def test_missing_fields_are_invalid_argument(channel: grpc.Channel) -> None:
    fleet = fleet_pb2_grpc.FleetServiceStub(channel)
    agent = agent_pb2_grpc.AgentServiceStub(channel)
    calls: list[tuple[str, Any]] = [
        ("rollout without model", lambda: fleet.CreateRollout(fleet_pb2.CreateRolloutRequest(), timeout=5)),
        ("fetch without sha256", lambda: list(agent.FetchArtifact(agent_pb2.FetchArtifactRequest(), timeout=5))),
        ("control without id", lambda: fleet.ControlRollout(fleet_pb2.ControlRolloutRequest(action=1), timeout=5)),
    ]  # fmt: skip
    for what, call in calls:
        with pytest.raises(grpc.RpcError) as exc:
            call()
        assert _code(exc) in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), what

    for hello in (agent_pb2.AgentMessage(hello=agent_pb2.Hello()), agent_pb2.AgentMessage()):
        s = AgentStream(channel)
        s.send(hello)
        with pytest.raises(grpc.RpcError) as exc:
            s.first()
        s.close()
        assert _code(exc) == grpc.StatusCode.INVALID_ARGUMENT
    _serving(channel)


def test_out_of_order_stream_messages_are_refused(channel: grpc.Channel) -> None:
    for first in (
        agent_pb2.AgentMessage(status=agent_pb2.StatusReport()),
        agent_pb2.AgentMessage(event=agent_pb2.CommandEvent(command_id="c", step=agent_pb2.STEP_DONE)),
    ):
        s = AgentStream(channel)
        s.send(first)
        with pytest.raises(grpc.RpcError) as exc:
            s.first()
        s.close()
        assert _code(exc) == grpc.StatusCode.INVALID_ARGUMENT
        assert "first message must be a Hello" in exc.value.details()  # type: ignore[attr-defined]

    def data_first() -> Iterator[fleet_pb2.PushModelRequest]:
        yield fleet_pb2.PushModelRequest(data=b"abc")

    with pytest.raises(grpc.RpcError) as exc:
        fleet_pb2_grpc.FleetServiceStub(channel).PushModel(data_first(), timeout=5)
    assert _code(exc) == grpc.StatusCode.INVALID_ARGUMENT
    _serving(channel)


def test_slow_loris_clients_time_out_and_others_are_served(controller: str) -> None:
    lorises: list[tuple[grpc.Channel, AgentStream]] = []
    outcome: dict[int, tuple[grpc.StatusCode, float]] = {}

    def wait_out(i: int, s: AgentStream) -> None:
        t0 = time.monotonic()
        try:
            s.first()
        except grpc.RpcError as exc:
            outcome[i] = (exc.code(), time.monotonic() - t0)  # type: ignore[attr-defined]

    threads = []
    for i in range(8):  # each on its own connection: opens Connect, then says nothing
        ch = grpc.insecure_channel(controller, options=[("grpc.use_local_subchannel_pool", 1)])
        s = AgentStream(ch)
        lorises.append((ch, s))
        threads.append(threading.Thread(target=wait_out, args=(i, s), daemon=True))
        threads[-1].start()
    time.sleep(0.3)
    try:
        with grpc.insecure_channel(controller) as ch:  # meanwhile, a real agent is welcomed at once
            t0 = time.monotonic()
            good = AgentStream(ch)
            good.send(_hello("patient-dev"))
            assert good.first().WhichOneof("body") == "welcome"
            welcomed = time.monotonic() - t0
            _serving(ch)
            good.close()
        assert welcomed < HELLO_TIMEOUT_S / 2, welcomed
        for t in threads:
            t.join(HELLO_TIMEOUT_S + 10)
        assert len(outcome) == 8
        for code, after in outcome.values():
            assert code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert HELLO_TIMEOUT_S - 0.5 < after < HELLO_TIMEOUT_S + 5
    finally:
        for ch, s in lorises:
            s.close()
            ch.close()


def test_a_second_hello_is_ignored(channel: grpc.Channel) -> None:
    s = AgentStream(channel)
    s.send(_hello("twice-dev", site="a"))
    assert s.first().WhichOneof("body") == "welcome"
    s.send(_hello("someone-else", site="b"))  # the identity is fixed by the first Hello
    nan = float("nan")  # stored as 0, not shown as 'nan' in every listing
    bad = common_pb2.PipelineStatus(name="p", health=common_pb2.Health(fps=nan, latency_p95_ms=float("inf")))
    s.send(agent_pb2.AgentMessage(status=agent_pb2.StatusReport(pipelines=[bad])))
    fleet = fleet_pb2_grpc.FleetServiceStub(channel)
    deadline = time.monotonic() + 15  # the status is written by a batching writer
    while True:
        dev = fleet.GetDevice(fleet_pb2.GetDeviceRequest(device_id="twice-dev"), timeout=5)
        if dev.pipelines or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert dev.online
    assert [(p.health.fps, p.health.latency_p95_ms) for p in dev.pipelines] == [(0.0, 0.0)]
    with pytest.raises(grpc.RpcError) as exc:
        fleet.GetDevice(fleet_pb2.GetDeviceRequest(device_id="someone-else"), timeout=5)
    assert _code(exc) == grpc.StatusCode.NOT_FOUND
    s.close()


def test_bytes_that_are_not_the_message_are_invalid_argument(channel: grpc.Channel) -> None:
    """They were UNKNOWN ('Unexpected DecodeError') with a traceback in the controller's log per call."""
    junk = b"\xff" * 10
    raw = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
    unary = channel.unary_unary("/edgefleet.proto.v1.FleetService/GetDevice", **raw)  # type: ignore[arg-type]
    with pytest.raises(grpc.RpcError) as exc:
        unary(junk, timeout=5)
    assert _code(exc) == grpc.StatusCode.INVALID_ARGUMENT and "not a valid message" in (exc.value.details() or "")
    stream = channel.stream_stream("/edgefleet.proto.v1.AgentService/Connect", **raw)  # type: ignore[arg-type]
    with pytest.raises(grpc.RpcError) as exc:
        list(stream(iter([junk]), timeout=5))
    assert _code(exc) == grpc.StatusCode.INVALID_ARGUMENT
    # an id with a trailing newline passed '^...$' and split the controller's log lines
    s = AgentStream(channel)
    s.send(_hello("cam-nl\n"))
    with pytest.raises(grpc.RpcError) as exc:
        s.first()
    s.close()
    assert _code(exc) == grpc.StatusCode.INVALID_ARGUMENT
    _serving(channel)
