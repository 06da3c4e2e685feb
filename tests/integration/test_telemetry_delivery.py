"""End-to-end telemetry delivery under faults, with real processes: agent processes (the agent's
``MqttPublisher`` and a disk spool), controller processes (``edgefleet controller serve --mqtt``), a real
Mosquitto with persistence, and two watchers connected throughout (a plain ``mosquitto_sub`` and
``edgefleet telemetry tail``), which make the broker answer every PUBACK with success.

The broker is restarted with SIGTERM and SIGKILL, with and without persistence; each time the controllers
reach it again last (a TCP gate in front of the broker holds them back), and once the controller is down
for 60 s while the agents go on publishing. Per device: every sequence the agent appended is stored
exactly once, and the spool dropped nothing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.telemetry_broker import Mosquitto, TcpGate, free_port
from tests.integration.test_control_plane import EDGEFLEET, Proc, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AGENT = Path(__file__).with_name("telemetry_agent.py")
FLEET = "itest"


@dataclass
class Agent:
    device: str
    proc: subprocess.Popen[bytes]
    log: Path
    stats_file: Path

    def appended(self) -> list[int]:
        return [int(x) for x in self.log.read_text(encoding="utf-8").split()]

    def stats(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.stats_file.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return {}


class Rig:
    """One broker behind a gate for the controllers, controller replicas, agents and two watchers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        try:
            self.broker = Mosquitto(root / "broker", persistence=True)
        except FileNotFoundError:
            pytest.skip("mosquitto is not installed")
        self.broker.start()
        self.gate = TcpGate(self.broker.port)
        self.db = f"sqlite:///{root / 'controller.db'}"
        self.controllers: dict[str, Proc] = {}
        self.agents: list[Agent] = []
        self.watchers: list[subprocess.Popen[bytes]] = []

    def start_controller(self, replica: str) -> Proc:
        log = self.root / f"controller-{replica}.log"
        mark = log.read_text(errors="replace").count("telemetry ingest connected") if log.exists() else 0
        # (the count goes on from an earlier run of the same replica: its log is appended to)
        proc = Proc(
            [
                EDGEFLEET, "controller", "serve", "--insecure", "--allow-unsigned",
                "--listen", f"127.0.0.1:{free_port()}", "--db", self.db, "--data-dir", str(self.root / "data"),
                "--mqtt", self.gate.url, "--replica-id", replica,
            ],
            log,
        ).start()  # fmt: skip
        wait_for(f"controller {replica} subscribed", lambda: proc.text().count("telemetry ingest connected") > mark, 30)
        self.controllers[replica] = proc
        return proc

    def start_watchers(self, device: str) -> None:
        url = self.broker.url
        tap = self.root / "tap.txt"
        for args, out in (
            (
                ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(self.broker.port), "-V", "mqttv5", "-q", "1", "-c",
                 "-i", "tap", "-t", "edgefleet/v1/#"],
                tap,
            ),
            ([EDGEFLEET, "telemetry", "tail", device, "--broker", url, "--json"], self.root / "tail.txt"),
        ):  # fmt: skip
            with out.open("ab") as f:
                self.watchers.append(subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT))
        wait_for("the watchers' first messages", lambda: tap.exists() and tap.stat().st_size > 0, 30)

    def start_agent(self, device: str, rate: float = 10.0) -> Agent:
        log, stats = self.root / f"{device}.seqs", self.root / f"{device}.json"
        with (self.root / f"{device}.log").open("ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable, str(AGENT), "--broker", self.broker.url, "--fleet", FLEET, "--device", device,
                    "--spool", str(self.root / f"{device}-spool.db"), "--log", str(log), "--stats", str(stats),
                    "--rate", str(rate),
                ],
                stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2],
            )  # fmt: skip
        agent = Agent(device, proc, log, stats)
        self.agents.append(agent)
        return agent

    def restart_broker(self, sig: int, persistence: bool, down_s: float, held_s: float) -> None:
        """Stop the broker with ``sig``, keep it down ``down_s``, start it with ``persistence``; the
        controllers reach it ``held_s`` after the agents and watchers can."""
        seen = {r: self._subscriptions(c) for r, c in self.controllers.items()}
        self.gate.close()
        self.broker.stop(sig)
        time.sleep(down_s)
        self.broker.persistence = persistence
        self.broker.start()
        time.sleep(held_s)
        self.gate.open()
        for replica, proc in self.controllers.items():
            wait_for(f"controller {replica} back", lambda p=proc, r=replica: self._subscriptions(p) > seen[r], 30)

    @staticmethod
    def _subscriptions(proc: Proc) -> int:
        return proc.text().count("telemetry ingest connected")

    def drain(self, timeout_s: float) -> None:
        """Stop publishing, wait until every agent's spool is empty, then stop the agents."""
        for a in self.agents:
            a.proc.send_signal(signal.SIGUSR1)
        wait_for(
            "every spool to drain",
            lambda: all(a.stats().get("publishing") is False and a.stats().get("pending") == 0 for a in self.agents),
            timeout_s,
            every=0.5,
        )
        for a in self.agents:
            a.proc.send_signal(signal.SIGTERM)
        for a in self.agents:
            a.proc.wait(30)

    def stored(self, device: str) -> list[int]:
        from edgefleet.cloud._db import create_engine
        from edgefleet.cloud._telemetry import TelemetryStore

        engine = create_engine(self.db)
        try:
            return TelemetryStore(engine, create=False).sequences(device, "telemetry")
        finally:
            engine.dispose()

    def close(self) -> None:
        for a in self.agents:
            if a.proc.poll() is None:
                a.proc.kill()
                a.proc.wait(5)
        for w in self.watchers:
            w.terminate()
            w.wait(5)
        for c in self.controllers.values():
            c.kill(signal.SIGTERM)
        self.gate.stop()
        self.broker.stop()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    try:
        yield r
    finally:
        r.close()


FAULTS = (  # (signal, persistence when the broker comes back)
    (signal.SIGTERM, True),
    (signal.SIGKILL, True),
    (signal.SIGTERM, False),
    (signal.SIGKILL, False),
)


def _check(rig: Rig) -> dict[str, dict[str, int]]:
    """Per device: every appended sequence stored exactly once, in order; nothing dropped by the spool."""
    report: dict[str, dict[str, int]] = {}
    for a in rig.agents:
        appended, stored = a.appended(), rig.stored(a.device)
        assert appended == sorted(set(appended)), "the agent's own sequence is not increasing"
        lost = sorted(set(appended) - set(stored))
        report[a.device] = {"appended": len(appended), "stored": len(stored), "lost": len(lost)}
        assert not lost, f"{a.device}: {len(lost)} of {len(appended)} never stored (first {lost[:5]}); {report}"
        assert stored == appended, f"{a.device}: stored more than appended"
        assert sum(a.stats()["dropped"].values()) == 0, a.stats()
    return report


@pytest.mark.timeout(480)
def test_watchers_broker_restarts_and_a_controller_outage_lose_nothing(rig: Rig) -> None:
    rig.start_controller("r1")
    agents = [rig.start_agent("cam-a"), rig.start_agent("cam-b")]
    rig.start_watchers("cam-a")
    wait_for("both agents publishing", lambda: all(a.stats().get("acked", 0) > 5 for a in agents), 30)
    for sig, persistence in FAULTS:
        rig.restart_broker(sig, persistence, down_s=4.0, held_s=3.0)
        time.sleep(4.0)
    rig.controllers["r1"].kill(signal.SIGTERM)  # the controller is down for a minute; agents keep publishing
    time.sleep(60.0)
    rig.start_controller("r1")
    rig.drain(120)
    report = _check(rig)
    assert all(r["appended"] > 500 for r in report.values()), report
    assert (rig.root / "tap.txt").stat().st_size > 0 and (rig.root / "tail.txt").stat().st_size > 0


@pytest.mark.timeout(300)
def test_two_replicas_on_one_shared_subscription_lose_nothing_through_broker_restarts(rig: Rig) -> None:
    rig.start_controller("r1")
    rig.start_controller("r2")
    agents = [rig.start_agent("cam-c"), rig.start_agent("cam-d")]
    rig.start_watchers("cam-c")
    wait_for("both agents publishing", lambda: all(a.stats().get("acked", 0) > 5 for a in agents), 30)
    for sig, persistence in FAULTS[:3]:
        rig.restart_broker(sig, persistence, down_s=4.0, held_s=3.0)
        time.sleep(4.0)
    rig.drain(120)
    _check(rig)
    logs = {r: c.text() for r, c in rig.controllers.items()}
    assert all("telemetry ingest connected" in text for text in logs.values())


def test_gate_holds_a_client_back(tmp_path: Path) -> None:
    """The test rig's own gate: closed, nothing gets through; opened, connections work again."""
    import socket

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        gate = TcpGate(srv.getsockname()[1])
        try:
            with socket.create_connection(("127.0.0.1", gate.port), timeout=2) as c:
                peer, _ = srv.accept()
                c.sendall(b"ping")
                assert peer.recv(4) == b"ping"
                gate.close()
                assert c.recv(4) == b""  # cut
                peer.close()
            with socket.create_connection(("127.0.0.1", gate.port), timeout=2) as c:
                assert c.recv(4) == b""  # refused while closed
            gate.open()
            with socket.create_connection(("127.0.0.1", gate.port), timeout=2) as c:
                peer, _ = srv.accept()
                peer.sendall(b"pong")
                assert c.recv(4) == b"pong"
                peer.close()
        finally:
            gate.stop()
