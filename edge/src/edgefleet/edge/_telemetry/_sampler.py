"""Device figures: CPU, RAM, disk (psutil); GPUs through NVML (dGPU) or tegrastats (Jetson)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil  # type: ignore[import-untyped]

from edgefleet.proto.v1 import telemetry_pb2 as pb

from ._tegrastats import TegraStats, parse_tegrastats

__all__ = ["GpuSample", "GpuSource", "NvmlSource", "SystemSampler", "TegrastatsSource", "detect_gpu_source"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    utilization_pct: float
    memory_used_bytes: int = 0
    memory_total_bytes: int = 0
    temperature_c: float = 0.0
    power_w: float = 0.0
    emc_utilization_pct: float = 0.0


@dataclass(frozen=True)
class GpuReading:
    gpus: list[GpuSample] = field(default_factory=list)
    temperatures_c: dict[str, float] = field(default_factory=dict)
    power_w: dict[str, float] = field(default_factory=dict)


class GpuSource(Protocol):
    name: str

    def read(self) -> GpuReading: ...

    def close(self) -> None: ...


class NvmlSource:
    """Discrete GPUs through NVML (``pip install nvidia-ml-py``)."""

    name = "nvml"

    def __init__(self) -> None:
        import pynvml

        self._nvml: Any = pynvml
        pynvml.nvmlInit()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def read(self) -> GpuReading:
        nv = self._nvml
        out = []
        for i, h in enumerate(self._handles):
            util = nv.nvmlDeviceGetUtilizationRates(h)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            name = nv.nvmlDeviceGetName(h)
            try:
                power = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
            except nv.NVMLError:
                power = 0.0
            out.append(
                GpuSample(
                    index=i,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    utilization_pct=float(util.gpu),
                    memory_used_bytes=int(mem.used),
                    memory_total_bytes=int(mem.total),
                    temperature_c=float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                    power_w=power,
                )
            )
        return GpuReading(out)

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class TegrastatsSource:
    """Jetson: a ``tegrastats --interval`` child process; ``read`` returns the latest line's figures."""

    name = "tegrastats"

    def __init__(self, executable: str = "tegrastats", interval_ms: int = 1000) -> None:
        path = shutil.which(executable)
        if path is None:
            raise FileNotFoundError(executable)
        self._latest: TegraStats | None = None
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [path, "--interval", str(interval_ms)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._pump, name="edgefleet-tegrastats", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        stdout = self._proc.stdout
        if stdout is None:
            return
        for line in stdout:
            stats = parse_tegrastats(line)
            if stats is not None:
                with self._lock:
                    self._latest = stats

    def read(self) -> GpuReading:
        with self._lock:
            stats = self._latest
        return reading_from_tegrastats(stats) if stats is not None else GpuReading()

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._thread.join(timeout=2.0)


def reading_from_tegrastats(stats: TegraStats) -> GpuReading:
    """The integrated GPU shares DRAM with the CPU, so its memory is the RAM figure."""
    gpu = GpuSample(
        index=0,
        name="tegra",
        utilization_pct=stats.gpu_pct or 0.0,
        memory_used_bytes=stats.ram_used_bytes,
        memory_total_bytes=stats.ram_total_bytes,
        temperature_c=stats.gpu_temperature_c or 0.0,
        power_w=stats.gpu_power_w or 0.0,
        emc_utilization_pct=stats.emc_pct or 0.0,
    )
    return GpuReading([gpu], dict(stats.temperatures_c), dict(stats.power_w))


def detect_gpu_source(prefer: str = "auto") -> GpuSource | None:
    """``auto``: tegrastats where it exists (Jetson), else NVML where the library and a driver are found."""
    if prefer in ("auto", "tegrastats") and shutil.which("tegrastats"):
        try:
            return TegrastatsSource()
        except OSError as exc:
            _log.warning("tegrastats unavailable: %s", exc)
    if prefer in ("auto", "nvml"):
        try:
            return NvmlSource()
        except ImportError:
            _log.debug("NVML unavailable: install nvidia-ml-py for GPU figures")
        except Exception as exc:  # pynvml raises NVMLError subclasses when no driver is loaded
            _log.debug("NVML unavailable: %s", exc)
    return None


class SystemSampler:
    """Fills ``Telemetry.System``. ``disk_path`` is the filesystem reported (the spool's, by default)."""

    def __init__(self, gpu: GpuSource | None = None, disk_path: str | Path = "/") -> None:
        self._gpu = gpu
        self._disk_path = str(disk_path)
        psutil.cpu_percent(percpu=True)  # prime: the first call has no interval to measure

    def sample(self) -> pb.Telemetry.System:
        per_core = psutil.cpu_percent(percpu=True)
        mem = psutil.virtual_memory()
        system = pb.Telemetry.System(
            cpu_pct=sum(per_core) / len(per_core) if per_core else 0.0,
            cpu_per_core_pct=per_core,
            ram_used_bytes=int(mem.total - mem.available),
            ram_total_bytes=int(mem.total),
        )
        try:
            disk = psutil.disk_usage(self._disk_path)
            system.disk_used_bytes = int(disk.used)
            system.disk_total_bytes = int(disk.total)
        except OSError as exc:
            _log.debug("disk usage of %s unavailable: %s", self._disk_path, exc)
        if self._gpu is not None:
            try:
                reading = self._gpu.read()
            except Exception:
                _log.warning("GPU figures from %s failed", self._gpu.name, exc_info=True)
            else:
                system.gpu_source = self._gpu.name
                for g in reading.gpus:
                    system.gpus.add(**asdict(g))
                system.temperatures_c.update(reading.temperatures_c)
                system.power_w.update(reading.power_w)
        return system

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()
