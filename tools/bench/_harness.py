"""Shared pieces of the benchmarks (swap_bench.py, the telemetry benches, tools/sim/fleet_sim.py): the
machine's description and load, the JSON they print, free loopback ports, the ``--db`` databases, and a
real `edgefleet controller serve` process."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load() -> dict[str, Any]:
    """`uptime`'s load averages, for the record next to every figure (other work shares the cores)."""
    one, five, fifteen = os.getloadavg()
    return {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_1m": one, "load_5m": five, "load_15m": fifteen}


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu_model": "",
        "note": "CPU only; the cores are shared with the load generator and with other work (see load)",
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(ImportError):
        import grpc

        info["grpcio"] = grpc.__version__
    with contextlib.suppress(ImportError):
        import onnxruntime as ort

        info["onnxruntime"] = ort.__version__
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        sha = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "sdk", "edge", "cloud", "proto"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
        info["commit"] = sha + ("+uncommitted changes in sdk/edge/cloud/proto" if dirty else "")
    return info


def emit(result: dict[str, Any], out: Path | None) -> None:
    """Add the load at the end, print the result as JSON and write it to ``out`` if given."""
    result["load_at_end"] = load()
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")


def wait_for(what: str, fn: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    """Poll ``fn`` until it returns something truthy; bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as exc:  # the server may still be starting
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class ControllerProcess:
    """`edgefleet controller serve` on a free loopback port, logging to a file; stopped with SIGTERM."""

    def __init__(
        self,
        workdir: Path,
        db_url: str,
        *,
        trusted_keys: tuple[Path, ...] = (),
        allow_unsigned: bool = False,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log = workdir / "controller.log"
        args = [
            EDGEFLEET,
            "controller",
            "serve",
            "--db",
            db_url,
            "--listen",
            self.address,
            "--data-dir",
            str(workdir / "controller"),
            "--insecure",
        ]
        for k in trusted_keys:
            args += ["--trusted-key", str(k)]
        if allow_unsigned:
            args.append("--allow-unsigned")
        self.args = [*args, *extra]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ControllerProcess:
        from edgefleet.cloud import FleetClient

        with self.log.open("ab") as f:
            self.proc = subprocess.Popen(self.args, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        with FleetClient(self.address, timeout_s=5) as c:
            wait_for("the controller", lambda: self._alive() and c.list_models() is not None, timeout, 0.3)
        return self

    def _alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"the controller exited; see {self.log}")
        return True

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the controller is not running")
        return self.proc.pid

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


@contextlib.contextmanager
def database_url(spec: str, sqlite_path: Path) -> Iterator[str]:
    """``--db`` of the benchmarks: ``sqlite`` (a file at ``sqlite_path``) or ``postgresql://...`` (a fresh
    database on that server, dropped afterwards)."""
    if spec == "sqlite":
        yield f"sqlite:///{sqlite_path}"
    elif spec.startswith("postgresql"):
        with postgres_database(spec) as url:
            yield url
    else:
        raise SystemExit(f"--db: sqlite or postgresql://..., got {spec!r}")


@contextlib.contextmanager
def postgres_database(dsn: str) -> Iterator[str]:
    """A fresh database on the PostgreSQL at ``dsn`` (trust auth), dropped afterwards."""
    import uuid

    import psycopg

    name = f"edgefleet_bench_{uuid.uuid4().hex[:10]}"
    from urllib.parse import urlsplit

    parts = urlsplit(dsn)
    base = f"{parts.scheme}://{parts.netloc}"
    with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
