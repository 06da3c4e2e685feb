"""Where a benchmark cell's CPU time went: per thread of this process (Python threads by name, digits
folded: ``edgefleet-source-#``; native ones as ``native``), its child processes (the analytics process),
and how busy the whole host was, sampled every 500 ms on a thread from ``/proc`` (Linux only).

    with CpuSampler() as cpu:
        ...                                   # the cell
    cpu.summary(frames)                       # CPU seconds per group, and per 1,000 frames

A thread's CPU time is time it ran: waiting for the GIL, a lock or the GPU is not in it. Two cells that
spend the same CPU per frame on a thread but differ in its wall time per batch waited, not worked.
Threads that end between two samples keep the time of their last sample.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _ticks(stat: Path) -> int | None:
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


def _host() -> tuple[int, int] | None:
    try:
        cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    values = [int(v) for v in cpu]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def _children() -> list[int]:
    out: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        try:
            out += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


class CpuSampler:
    def __init__(self, period_s: float = 0.5) -> None:
        self._period = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._first: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._names: dict[str, str] = {}
        self._host0: tuple[int, int] | None = None
        self._host1: tuple[int, int] | None = None
        self._t0 = self._t1 = 0.0

    def _sample(self) -> None:
        names = {str(t.native_id): re.sub(r"\d+", "#", t.name) for t in threading.enumerate() if t.native_id}
        self._names.update(names)
        for task in Path("/proc/self/task").iterdir():
            got = _ticks(task / "stat")
            if got is not None:
                key = f"t{task.name}"
                self._first.setdefault(key, got)
                self._last[key] = got
        for pid in _children():
            got = _ticks(Path(f"/proc/{pid}/stat"))
            if got is not None:
                key = f"c{pid}"
                self._first.setdefault(key, 0)  # a child's whole life counts (it starts in the cell)
                self._last[key] = got
        self._host1 = _host()
        self._t1 = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self._sample()

    def __enter__(self) -> CpuSampler:
        self._host0 = _host()
        self._t0 = time.monotonic()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def summary(self, frames: int) -> dict[str, Any]:
        groups: dict[str, float] = {}
        for key, last in self._last.items():
            used = (last - self._first.get(key, last)) / _TICK
            name = "child processes" if key.startswith("c") else self._names.get(key[1:], "native")
            groups[name] = groups.get(name, 0.0) + used
        per_k = {k: round(v / frames * 1000, 4) for k, v in sorted(groups.items())} if frames else {}
        host = None
        if self._host0 and self._host1 and self._host1[1] > self._host0[1]:
            host = round(100 * (self._host1[0] - self._host0[0]) / (self._host1[1] - self._host0[1]), 1)
        return {
            "wall_s": round(self._t1 - self._t0, 2),
            "cpu_s": {k: round(v, 2) for k, v in sorted(groups.items())},
            "cpu_s_per_1000_frames": per_k,
            "host_busy_pct": host,
        }
