"""What ``edgefleet telemetry show`` says about a device's video analytics over a window: every zone's and
line's counts per class (now, and how much they grew in the window), the analytics stages' counters, and
the analytics events stored in the window by kind and region.

It reads stored messages in protobuf's JSON mapping (field names in lowerCamelCase, 64-bit integers as
strings, zero values left out).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["analytics_summary"]

_KINDS = {
    "KIND_ZONE_ENTER": "enter",
    "KIND_ZONE_LEAVE": "leave",
    "KIND_ZONE_DWELL": "dwell",
    "KIND_LINE_CROSS": "cross",
    "KIND_TRACK_END": "track_end",
}


def _n(row: Mapping[str, Any], key: str) -> int:
    return int(row.get(key, 0) or 0)


def _regions(message: Mapping[str, Any] | None) -> dict[tuple[str, str, str, str, str], Mapping[str, Any]]:
    out: dict[tuple[str, str, str, str, str], Mapping[str, Any]] = {}
    for p in (message or {}).get("pipelines", ()):
        for r in p.get("regions", ()):
            key = (p.get("name", ""), r.get("streamId", ""), r.get("name", ""), r.get("kind", ""), r.get("label", ""))
            out[key] = r
    return out


def analytics_summary(
    latest: Mapping[str, Any] | None, first: Mapping[str, Any] | None, events: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """``latest`` / ``first``: the newest and the oldest telemetry message of the window; ``events``: the
    window's event messages. Counts "in the window" are the growth of the cumulative counters from the
    first message to the latest (a counter that went down, an agent restarted, counts from zero)."""
    now = _regions(latest)
    then = _regions(first)
    regions = []
    for key, r in sorted(now.items()):
        pipeline, stream, name, kind, label = key
        row: dict[str, Any] = {"pipeline": pipeline, "stream": stream, "name": name, "kind": kind, "label": label}
        for field, js in (("in", "inTotal"), ("out", "outTotal")):
            total = _n(r, js)
            before = _n(then[key], js) if key in then else 0
            row[f"{field}_total"] = total
            row[f"{field}_since"] = total - before if total >= before else total
        row["inside"] = _n(r, "inside")
        row["in_recent"] = _n(r, "inWindow")
        row["out_recent"] = _n(r, "outWindow")
        row["recent_s"] = float(r.get("windowS", 0.0) or 0.0)
        regions.append(row)
    stages = []
    for p in (latest or {}).get("pipelines", ()):
        for st in p.get("analytics", ()):
            stages.append({"pipeline": p.get("name", ""), "stage": st.get("stage", ""), "values": st.get("values", {})})
    counted: Counter[tuple[str, str, str]] = Counter()
    suppressed = 0
    for e in events:
        a = e.get("analytics")
        if a is None:
            continue
        counted[(a.get("streamId", ""), _KINDS.get(a.get("kind", ""), a.get("kind", "?")), a.get("region", ""))] += 1
        suppressed += _n(a, "suppressed")
    by_kind = [{"stream": s, "kind": k, "region": r, "events": n} for (s, k, r), n in sorted(counted.items())]
    return {"regions": regions, "stages": stages, "events": by_kind, "events_suppressed": suppressed}
