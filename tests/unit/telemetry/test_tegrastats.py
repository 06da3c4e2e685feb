"""tegrastats lines as NVIDIA's Jetson documentation and real boards print them."""

from __future__ import annotations

import pytest

from edgefleet.edge._telemetry import parse_tegrastats
from edgefleet.edge._telemetry._sampler import reading_from_tegrastats

MB = 1024 * 1024

# Jetson AGX Orin (JetPack 5/6), the line format of the Jetson Linux developer guide.
ORIN_AGX = (
    "RAM 2448/30536MB (lfb 6239x4MB) SWAP 0/15268MB (cached 0MB) "
    "CPU [1%@729,0%@729,0%@729,0%@729,0%@729,0%@729,0%@729,0%@729,off,off,off,off] EMC_FREQ 0% "
    "GR3D_FREQ 0% cpu@47.5C soc2@44.406C soc0@45.156C gpu@45.156C tj@47.5C soc1@45.5C "
    "VDD_GPU_SOC 2386mW/2386mW VDD_CPU_CV 397mW/397mW VIN_SYS_5V0 3722mW/3722mW"
)
# Jetson Orin Nano / NX (JetPack 6): timestamp prefix, shared CPU/GPU/CV rail.
ORIN_NANO = (
    "07-29-2026 18:00:27 RAM 2272/7620MB (lfb 4x4MB) SWAP 221/3810MB (cached 0MB) "
    "CPU [0%@729,0%@1036,0%@1036,0%@1036,0%@729,0%@729] GR3D_FREQ 0% cpu@54.937C soc2@55.562C "
    "soc0@56.156C gpu@55.468C tj@56.656C soc1@56.656C VDD_IN 4673mW/4673mW VDD_CPU_GPU_CV 527mW/527mW "
    "VDD_SOC 1339mW/1339mW"
)
# Older L4T (Xavier/Nano era) format from the L4T 32.x tegrastats reference: IRAM, GR3D with a frequency.
L4T_32 = (
    "RAM 220/38955MB (lfb 847x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lfb 252kB) "
    "CPU [1%@102,5%@102,0%@102,0%@102] EMC_FREQ 1%@1600 GR3D_FREQ 23%@76 APE 25 "
    "CPU@33C GPU@32C AO@39.5C thermal@32.5C"
)


def test_orin_agx_line() -> None:
    s = parse_tegrastats(ORIN_AGX)
    assert s is not None
    assert (s.ram_used_bytes, s.ram_total_bytes) == (2448 * MB, 30536 * MB)
    assert s.swap_total_bytes == 15268 * MB
    assert len(s.cpu_pct) == 12 and s.cpu_pct[0] == 1.0 and s.cpu_pct[-1] is None
    assert s.cpu_freq_mhz[0] == 729
    assert s.gpu_pct == 0.0 and s.emc_pct == 0.0
    assert s.temperatures_c["cpu"] == 47.5 and s.gpu_temperature_c == 45.156
    assert s.power_w == {"VDD_GPU_SOC": 2.386, "VDD_CPU_CV": 0.397, "VIN_SYS_5V0": 3.722}
    assert s.gpu_power_w == 2.386


def test_orin_nano_line_with_timestamp() -> None:
    s = parse_tegrastats(ORIN_NANO)
    assert s is not None
    assert s.ram_used_bytes == 2272 * MB and s.swap_used_bytes == 221 * MB
    assert s.cpu_freq_mhz == (729, 1036, 1036, 1036, 729, 729)
    assert s.gpu_power_w == 0.527 and s.power_w["VDD_IN"] == 4.673
    assert set(s.temperatures_c) == {"cpu", "soc2", "soc0", "gpu", "tj", "soc1"}


def test_l4t32_line() -> None:
    s = parse_tegrastats(L4T_32)
    assert s is not None
    assert s.gpu_pct == 23.0 and s.emc_pct == 1.0
    assert s.cpu_mean_pct == pytest.approx(1.5)
    assert s.gpu_temperature_c == 32.0
    assert "IRAM" not in s.power_w and s.power_w == {}


def test_not_tegrastats() -> None:
    assert parse_tegrastats("") is None
    assert parse_tegrastats("tegrastats: permission denied") is None


def test_reading_for_telemetry() -> None:
    s = parse_tegrastats(ORIN_AGX)
    assert s is not None
    r = reading_from_tegrastats(s)
    g = r.gpus[0]
    assert g.memory_total_bytes == 30536 * MB  # integrated GPU: shared DRAM
    assert g.temperature_c == 45.156 and g.power_w == 2.386
