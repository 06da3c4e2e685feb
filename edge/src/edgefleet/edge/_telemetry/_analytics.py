"""What the pipelines' analytics stages produce, as telemetry: zone, line and track events (rate-limited per
stream) and the zones' and lines' counts per class for the periodic message (labels per region bounded)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk import AnalyticsEvent, EndedTrack, Result

from ._bucket import TokenBucket
from ._config import AnalyticsEventsConfig

__all__ = ["OTHER", "AnalyticsFeed"]

OTHER = "other"  # the label that sums the labels past a region's limit
_KIND = {
    "enter": pb.Event.Analytics.KIND_ZONE_ENTER,
    "leave": pb.Event.Analytics.KIND_ZONE_LEAVE,
    "dwell": pb.Event.Analytics.KIND_ZONE_DWELL,
    "cross": pb.Event.Analytics.KIND_LINE_CROSS,
}


class _Bucket(TokenBucket):
    """A stream's token bucket, and how many events it refused since it last gave one."""

    suppressed = 0


@dataclass
class _Row:
    inside: int = 0
    in_total: int = 0
    out_total: int = 0
    in_window: int = 0
    out_window: int = 0


class AnalyticsFeed:
    """Fed every result of every pipeline (result thread); read by the telemetry thread. Thread-safe."""

    def __init__(
        self, config: AnalyticsEventsConfig, labels_per_region: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.labels_per_region = labels_per_region
        self._clock = clock
        self._kinds = frozenset(config.kinds)
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._regions: dict[tuple[str, str], Result] = {}  # the latest result with regions, per stream
        self._admitted: dict[tuple[str, str, str], set[str]] = {}  # labels with a row of their own, per region
        self._lock = threading.Lock()
        self.suppressed_total = 0
        self.offered_total = 0

    def events(self, pipeline: str, result: Result) -> Iterator[pb.Event]:
        """Keep the result's region counts; yield the events to publish (within the stream's limit)."""
        if result.regions:
            with self._lock:
                self._regions[(pipeline, result.stream_id)] = result
        if not self.config.enabled:
            return
        wanted = [e for e in result.events if e.kind in self._kinds]
        ended = list(result.ended_tracks) if "track_end" in self._kinds else []
        if not wanted and not ended:
            return
        with self._lock:
            bucket = self._buckets.get((pipeline, result.stream_id))
            if bucket is None:
                bucket = self._buckets[(pipeline, result.stream_id)] = _Bucket(
                    self.config.max_per_s, self.config.burst, self._clock
                )
        items: list[tuple[Any, str, str, float, str, AnalyticsEvent | EndedTrack]]
        items = [(_KIND[e.kind], e.region, e.direction, e.dwell_s, "", e) for e in wanted]
        items += [(pb.Event.Analytics.KIND_TRACK_END, "", "", t.duration_s, t.reason, t) for t in ended]
        for kind, region, direction, dwell_s, reason, what in items:
            msg = self._event(pipeline, result, bucket)
            if msg is None:
                continue
            a = msg.analytics
            a.kind, a.region, a.direction, a.dwell_s, a.reason = kind, region, direction, dwell_s, reason
            a.track_id, a.label, a.class_id = what.track_id, what.label, what.class_id
            a.box.x1, a.box.y1, a.box.x2, a.box.y2 = what.box
            yield msg

    def _event(self, pipeline: str, result: Result, bucket: _Bucket) -> pb.Event | None:
        with self._lock:
            self.offered_total += 1
            if not bucket.take():
                bucket.suppressed += 1
                self.suppressed_total += 1
                return None
            suppressed, bucket.suppressed = bucket.suppressed, 0
        msg = pb.Event()
        a = msg.analytics
        a.pipeline = pipeline
        a.stream_id = result.stream_id
        a.frame_sequence = result.sequence
        a.captured_at.FromNanoseconds(int(result.timestamp * 1e9))
        a.model_version = f"{result.model}:{result.model_version}"
        a.suppressed = suppressed
        return msg

    def regions(self, pipeline: str) -> list[pb.Telemetry.Region]:
        """The latest counts of every zone and line of ``pipeline``, one row per stream, region and label:
        at most ``labels_per_region`` labels each, the rest summed as ``other``."""
        with self._lock:
            latest = [(sid, r) for (p, sid), r in sorted(self._regions.items()) if p == pipeline]
        out = []
        for stream_id, result in latest:
            for region in result.regions:
                rows: dict[str, _Row] = {}
                for field, counts in (
                    ("inside", region.inside),
                    ("in_total", region.in_total),
                    ("out_total", region.out_total),
                    ("in_window", region.in_window),
                    ("out_window", region.out_window),
                ):
                    for label, n in counts.items():
                        row = rows.setdefault(label, _Row())
                        setattr(row, field, getattr(row, field) + int(n))
                for label, row in self._bounded((pipeline, stream_id, region.name), rows):
                    out.append(
                        pb.Telemetry.Region(
                            stream_id=stream_id,
                            name=region.name,
                            kind=region.kind,
                            label=label,
                            inside=row.inside,
                            in_total=row.in_total,
                            out_total=row.out_total,
                            in_window=row.in_window,
                            out_window=row.out_window,
                            window_s=region.window_s,
                        )
                    )
        return out

    def _bounded(self, key: tuple[str, str, str], rows: dict[str, _Row]) -> list[tuple[str, _Row]]:
        """The first ``labels_per_region`` labels a region shows keep their own row for good (so a
        Prometheus counter never moves between series); later ones are summed as ``other``."""
        with self._lock:
            admitted = self._admitted.setdefault(key, set())
            for label in sorted(rows):
                if label not in admitted and len(admitted) < self.labels_per_region:
                    admitted.add(label)
        keep = sorted((lb, row) for lb, row in rows.items() if lb in admitted)
        rest = [row for lb, row in rows.items() if lb not in admitted]
        if not rest:
            return keep
        other = _Row()
        for row in rest:
            for f in ("inside", "in_total", "out_total", "in_window", "out_window"):
                setattr(other, f, getattr(other, f) + getattr(row, f))
        return [*keep, (OTHER, other)]

    def forget(self, pipeline: str) -> None:
        with self._lock:
            for key in [k for k in self._regions if k[0] == pipeline]:
                del self._regions[key]
            for key in [k for k in self._buckets if k[0] == pipeline]:
                del self._buckets[key]
            for region in [k for k in self._admitted if k[0] == pipeline]:
                del self._admitted[region]
