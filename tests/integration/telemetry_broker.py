"""A private Mosquitto for telemetry tests: own config, free loopback port, persistence, stop/restart."""

from __future__ import annotations

import contextlib
import getpass
import shutil
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


class _BrokerProcess:
    """A broker in a child process on a loopback port: ``url``, and ``stop()`` (SIGTERM, then SIGKILL)."""

    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def _wait_started(self) -> None:
        try:
            wait_port(self.port)
        except TimeoutError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None


class Mosquitto(_BrokerProcess):
    """``mosquitto -c <tmp>/mosquitto.conf`` on a free port; ``stop()`` saves its persistence file."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        if not Path(exe).exists():
            raise FileNotFoundError("mosquitto is not installed")
        self.exe = exe
        self.port = port or free_port()
        self.workdir = workdir
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "mosquitto.conf"
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence true\n"
            f"persistence_location {workdir / 'data'}/\n"
            "max_queued_messages 1000000\n"
            "max_inflight_messages 0\n"
            f"user {getpass.getuser()}\n"
            f"log_dest file {workdir / 'mosquitto.log'}\n",
            encoding="utf-8",
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Mosquitto:
        self.proc = subprocess.Popen(
            [self.exe, "-c", str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self._wait_started()
        return self


def wait_for(predicate: object, timeout_s: float, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(interval_s)
    return bool(callable(predicate) and predicate())


class EmbeddedBroker(_BrokerProcess):
    """edgefleet's own MQTT 5 broker (``python -m edgefleet.cloud._telemetry._embedded_broker``), with the
    same interface as :class:`Mosquitto`; its sessions live in memory, so a restart forgets them."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EmbeddedBroker:
        import sys

        module = "edgefleet.cloud._telemetry._embedded_broker"
        log = (self.workdir / "broker.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--port", str(self.port), "--persist", str(self.workdir / "state.json")],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        self._wait_started()
        return self
