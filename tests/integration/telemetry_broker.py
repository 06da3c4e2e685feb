"""A private Mosquitto for telemetry tests: own config, free loopback port, persistence, stop/restart."""

from __future__ import annotations

import contextlib
import getpass
import select
import shutil
import signal
import socket
import subprocess
import threading
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

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM (the broker saves what it persists), or ``sig=signal.SIGKILL`` (it saves nothing)."""
        if self.proc is None:
            return
        self.proc.send_signal(sig)
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

    def __init__(self, workdir: Path, port: int | None = None, *, persistence: bool = True) -> None:
        exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        if not Path(exe).exists():
            raise FileNotFoundError("mosquitto is not installed")
        self.exe = exe
        self.port = port or free_port()
        self.workdir = workdir
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "mosquitto.conf"
        self.persistence = persistence
        self.proc: subprocess.Popen[bytes] | None = None

    def _write_conf(self) -> None:
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            f"persistence {'true' if self.persistence else 'false'}\n"
            f"persistence_location {self.workdir / 'data'}/\n"
            "max_queued_messages 1000000\n"
            "max_inflight_messages 0\n"
            f"user {getpass.getuser()}\n"
            f"log_dest file {self.workdir / 'mosquitto.log'}\n",
            encoding="utf-8",
        )

    def start(self) -> Mosquitto:
        """Start (again) with the current ``persistence`` setting; without it the broker forgets every
        session and retained message it had."""
        self._write_conf()
        if not self.persistence:
            for f in (self.workdir / "data").glob("*.db"):
                f.unlink()
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
    """edgefleet's own MQTT 5 broker (``python -m edgefleet_devbroker``), with the
    same interface as :class:`Mosquitto`; its sessions live in memory, so a restart forgets them."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EmbeddedBroker:
        import sys

        module = "edgefleet_devbroker"
        log = (self.workdir / "broker.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--port", str(self.port), "--persist", str(self.workdir / "state.json")],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        self._wait_started()
        return self


class TcpGate:
    """A loopback TCP forwarder to ``target_port`` that a test opens and closes: closed, it cuts every
    connection through it and refuses new ones (accepts and hangs up), so the test decides when a
    client behind it (a controller's ingester) can reach the broker again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._open = threading.Event()
        self._open.set()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._thread = threading.Thread(target=self._accept, name="tcp-gate", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Cut what is connected through the gate and refuse new connections until :meth:`open`."""
        self._open.clear()
        self._cut()

    def open(self) -> None:
        self._open.set()

    def stop(self) -> None:
        self._stopped.set()
        self._open.clear()
        self._cut()
        self._listener.close()
        self._thread.join(5)

    def _cut(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 1.0)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        raise OSError("closed")
                    peer[s].sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            with self._lock:
                if (a, b) in self._pairs:
                    self._pairs.remove((a, b))
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
