"""The registry's artifact format lives in the SDK (``edgefleet models pack`` writes it without a
controller); the cloud CLI and client use the same function."""

from __future__ import annotations

from edgefleet.sdk import pack_package

__all__ = ["pack_package"]
