"""The agent's background work — writing a download to disk, verifying and installing an artifact — on
one thread of its own, at a lower CPU priority than the pipelines.

On a small device (the 2-core development machine) that work competes with the cameras' threads for the
cores; the scheduler gives the pipelines the CPU first when the installer thread runs at a higher nice
value (Linux sets it per thread: ``setpriority(PRIO_PROCESS, <thread id>, n)``). Nothing that creates
threads runs there: ONNX Runtime's worker threads, created when a model loads, would inherit the nice
value for the model's whole life, so loading a model stays on the ordinary threads.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["background_executor"]

_log = logging.getLogger(__name__)


def background_executor(nice: int) -> ThreadPoolExecutor:
    """One worker thread whose nice value is raised by ``nice`` (0: left as it is; Linux only)."""

    def lower_priority() -> None:
        if nice <= 0 or not sys.platform.startswith("linux"):  # elsewhere the call would renice a process
            return
        tid = threading.get_native_id()
        try:
            value = min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice)
            os.setpriority(os.PRIO_PROCESS, tid, value)
        except OSError as exc:
            _log.warning("cannot lower the install thread's priority (%s); it runs as the pipelines do", exc)
        else:
            _log.info("install thread %d runs at nice %d", tid, value)

    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgefleet-install", initializer=lower_priority)
