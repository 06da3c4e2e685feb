"""How busy the GPU's engines are while a benchmark cell runs: NVML's decoder (NVDEC) and SM utilisation,
sampled every 100 ms on a thread, through ctypes on the driver's ``libnvidia-ml.so.1`` (no extra package).

    with EngineSampler() as eng:
        ...                                   # the cell
    eng.summary(lo, hi)                       # over [lo, hi] on the sampler's clock, or None

NVML averages each figure over its own sampling period (``nvmlDeviceGetDecoderUtilization`` reports
it); utilisation is the share of that time an engine of the kind was busy, so 100 %
decoder utilisation means the video decoders had no idle time left.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any


class _Util(ctypes.Structure):
    _fields_ = (("gpu", ctypes.c_uint), ("memory", ctypes.c_uint))


def _library() -> Any:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if lib.nvmlInit_v2() != 0:
        return None
    return lib


class EngineSampler:
    def __init__(self, index: int = 0, period_s: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        self._lib = _library()
        self._period = period_s
        self._clock = clock
        self._handle = ctypes.c_void_p()
        if self._lib is not None and self._lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self._handle)):
            self._lib = None
        self.samples: list[tuple[float, int, int]] = []  # (clock, decoder %, SM %)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)

    def _sample(self) -> tuple[int, int] | None:
        lib = self._lib
        dec, period, util = ctypes.c_uint(), ctypes.c_uint(), _Util()
        if lib.nvmlDeviceGetDecoderUtilization(self._handle, ctypes.byref(dec), ctypes.byref(period)):
            return None
        if lib.nvmlDeviceGetUtilizationRates(self._handle, ctypes.byref(util)):
            return None
        return int(dec.value), int(util.gpu)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            got = self._sample()
            if got is not None:
                self.samples.append((self._clock(), *got))

    def __enter__(self) -> EngineSampler:
        if self._lib is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def summary(self, lo: float, hi: float) -> dict[str, Any] | None:
        """Median and maximum of each figure over the samples taken in [lo, hi] (the sampler's clock)."""
        inside = [s for s in self.samples if lo <= s[0] <= hi]
        if not inside:
            return None

        def stats(k: int) -> dict[str, float]:
            v = sorted(s[k] for s in inside)
            return {"p50": float(v[len(v) // 2]), "max": float(v[-1])}

        return {"samples": len(inside), "nvdec_util_pct": stats(1), "sm_util_pct": stats(2)}
