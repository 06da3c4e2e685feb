"""Versions written once: each distribution's ``pyproject.toml``, read back through importlib.metadata."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["distribution_version"]


def distribution_version(distribution: str) -> str:
    """The installed version of ``distribution`` (``edgefleet-sdk``, ``edgefleet-edge``...), or
    ``0+unknown`` when it runs from a source tree that was never installed."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+unknown"
