"""``promtool`` (Debian's ``prometheus`` package, tools/ci/install-system-deps.sh) for the metrics tests."""

from __future__ import annotations

import shutil
import subprocess

import pytest

PROMTOOL = shutil.which("promtool")
SKIP_REASON = "promtool not installed (Debian package prometheus: tools/ci/install-system-deps.sh; CI installs it)"


def check_metrics(text: str) -> str:
    """``promtool check metrics`` on an exposition; fails the test with its findings. Skips without promtool."""
    if PROMTOOL is None:
        pytest.skip(SKIP_REASON)
    out = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    problems = (out.stdout + out.stderr).strip()
    assert out.returncode == 0 and not problems, problems
    return text
