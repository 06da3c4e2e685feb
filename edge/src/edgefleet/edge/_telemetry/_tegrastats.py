"""Parse one line of Jetson ``tegrastats`` output (JetPack 4 to 6 formats).

Example (Jetson AGX Orin)::

    RAM 2448/30536MB (lfb 6239x4MB) SWAP 0/15268MB (cached 0MB) CPU [1%@729,off,...] EMC_FREQ 0%
    GR3D_FREQ 0% cpu@47.5C soc0@46.1C gpu@45.9C VDD_GPU_SOC 2386mW/2386mW VDD_CPU_CV 397mW/397mW

Fields the parser does not know are ignored; a line with no RAM field is not tegrastats output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["TegraStats", "parse_tegrastats"]

_MB = 1024 * 1024
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\]")
_CORE = re.compile(r"(\d+(?:\.\d+)?)%(?:@(\d+))?")
_ENGINE = re.compile(r"\b(GR3D|EMC)_FREQ (\d+(?:\.\d+)?)%")
_TEMP = re.compile(r"(?<![\w@])([A-Za-z][\w-]*)@(-?\d+(?:\.\d+)?)C\b")
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]+) (\d+)(?:mW)?/(\d+)(?:mW)?\b")


@dataclass(frozen=True)
class TegraStats:
    """What one tegrastats line says. Percentages 0-100, temperatures in °C, power in watts."""

    ram_used_bytes: int
    ram_total_bytes: int
    swap_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    cpu_pct: tuple[float | None, ...] = ()  # None for a core that is off
    cpu_freq_mhz: tuple[int | None, ...] = ()
    gpu_pct: float | None = None
    emc_pct: float | None = None
    temperatures_c: dict[str, float] = field(default_factory=dict)
    power_w: dict[str, float] = field(default_factory=dict)  # current reading per rail

    @property
    def cpu_mean_pct(self) -> float:
        online = [c for c in self.cpu_pct if c is not None]
        return sum(online) / len(online) if online else 0.0

    @property
    def gpu_temperature_c(self) -> float | None:
        for name, value in self.temperatures_c.items():
            if name.lower() == "gpu":
                return value
        return None

    @property
    def gpu_power_w(self) -> float | None:
        """The rail that feeds the GPU: VDD_GPU_SOC (AGX Orin), VDD_CPU_GPU_CV (Orin NX/Nano), VDD_GPU..."""
        for name in ("VDD_GPU_SOC", "VDD_CPU_GPU_CV", "VDD_GPU", "POM_5V_GPU", "VDD_SYS_GPU"):
            if name in self.power_w:
                return self.power_w[name]
        return None


def parse_tegrastats(line: str) -> TegraStats | None:
    """Parse one line; None when it is not tegrastats output."""
    ram = _RAM.search(line)
    if ram is None:
        return None
    swap = _SWAP.search(line)
    cores: list[float | None] = []
    freqs: list[int | None] = []
    cpu = _CPU.search(line)
    if cpu is not None:
        for item in cpu.group(1).split(","):
            m = _CORE.fullmatch(item.strip())
            cores.append(float(m.group(1)) if m else None)
            freqs.append(int(m.group(2)) if m and m.group(2) else None)
    engines = {m.group(1): float(m.group(2)) for m in _ENGINE.finditer(line)}
    # A core list "[1%@729,...]" holds "%@" but never "name@numberC"; temperatures are "name@47.5C".
    temps = {m.group(1): float(m.group(2)) for m in _TEMP.finditer(line)}
    rails = {
        m.group(1): int(m.group(2)) / 1000.0 for m in _RAIL.finditer(line) if m.group(1) not in {"RAM", "SWAP", "IRAM"}
    }
    return TegraStats(
        ram_used_bytes=int(ram.group(1)) * _MB,
        ram_total_bytes=int(ram.group(2)) * _MB,
        swap_used_bytes=int(swap.group(1)) * _MB if swap else None,
        swap_total_bytes=int(swap.group(2)) * _MB if swap else None,
        cpu_pct=tuple(cores),
        cpu_freq_mhz=tuple(freqs),
        gpu_pct=engines.get("GR3D"),
        emc_pct=engines.get("EMC"),
        temperatures_c=temps,
        power_w=rails,
    )
