"""What this device is: cheap detection only (files, env-free probes, imports that are already cheap)."""

from __future__ import annotations

import importlib.util
import logging
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["detect_capabilities"]

_log = logging.getLogger(__name__)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip("\x00\n ")
    except OSError:
        return ""


def _distro() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return ""


def _l4t() -> tuple[str, str]:
    text = _read("/etc/nv_tegra_release")
    m = re.search(r"R(\d+) \(release\), REVISION: ([\d.]+)", text)
    l4t = f"{m.group(1)}.{m.group(2)}" if m else ""
    jetpack = ""
    if l4t:
        major = int(l4t.split(".", maxsplit=1)[0])
        jetpack = {36: "6", 35: "5", 32: "4"}.get(major, "")
    return l4t, jetpack


def _gpu() -> str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""


def _cuda() -> str:
    for path in ("/usr/local/cuda/version.json", "/usr/local/cuda/version.txt"):
        text = _read(path)
        m = re.search(r'"cuda"\s*:\s*\{[^}]*"version"\s*:\s*"([\d.]+)"', text) or re.search(r"([\d]+\.[\d.]+)", text)
        if m:
            return m.group(1)
    return ""


def _version_of(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def _ort_providers() -> list[str]:
    if importlib.util.find_spec("onnxruntime") is None:
        return []
    try:
        import onnxruntime

        return list(onnxruntime.get_available_providers())
    except Exception as exc:  # a broken install must not stop the agent
        _log.debug("onnxruntime providers unavailable: %s", exc)
        return []


def _memory_mb() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 0


def detect_capabilities(agent_version: str) -> dict[str, Any]:
    """A dict in the shape of the Capabilities message (empty strings where nothing was found)."""
    l4t, jetpack = _l4t()
    tensorrt = _version_of("tensorrt") or _version_of("tensorrt-cu12")
    return {
        "arch": platform.machine(),
        "os": platform.system(),
        "os_release": platform.release(),
        "distro": _distro(),
        "python": platform.python_version(),
        "agent_version": agent_version,
        "gpu": _gpu(),
        "soc": _read("/proc/device-tree/model") if l4t else "",
        "jetpack": jetpack,
        "l4t": l4t,
        "cuda": _cuda(),
        "tensorrt": tensorrt,
        "ort_providers": _ort_providers(),
        "cpu_count": os.cpu_count() or 0,
        "memory_mb": _memory_mb(),
    }
