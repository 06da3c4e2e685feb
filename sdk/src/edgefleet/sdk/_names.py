"""The one rule for names edgefleet puts in paths, topics and certificates: model names, device ids,
fleet-CA names. Lower-case letters and digits, then also ``. _ -``; at most 64 characters."""

from __future__ import annotations

import re

__all__ = ["NAME_RE"]

NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}\Z")  # use .match: anchored at the start, \Z at the end
