"""What the pipelines' analytics stages produce, as telemetry: zone, line and track events (rate-limited per
stream) and the zones' and lines' counts per class for the periodic message (labels per region bounded)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk import Result

from ._config import AnalyticsEventsConfig

__all__ = ["OTHER", "AnalyticsFeed"]

OTHER = "other"  # the label that sums the labels past a region's limit
_KIND = {
    "enter": pb.Event.Analytics.KIND_ZONE_ENTER,
    "leave": pb.Event.Analytics.KIND_ZONE_LEAVE,
    "dwell": pb.Event.Analytics.KIND_ZONE_DWELL,
    "cross": pb.Event.Analytics.KIND_LINE_CROSS,
}


class _Bucket:
    """A token bucket (``rate`` per second, ``burst`` saved) and what it refused since it last gave."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self.tokens = float(burst)
        self.last = clock()
        self.suppressed = 0

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.suppressed += 1
        return False


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
        for e in wanted:
            msg = self._event(pipeline, result, bucket)
            if msg is None:
                continue
            a = msg.analytics
            a.kind = _KIND[e.kind]
            a.region = e.region
            a.track_id = e.track_id
            a.label = e.label
            a.class_id = e.class_id
            a.direction = e.direction
            a.dwell_s = e.dwell_s
            _box(a.box, e.box)
            yield msg
        for t in ended:
            msg = self._event(pipeline, result, bucket)
            if msg is None:
                continue
            a = msg.analytics
            a.kind = pb.Event.Analytics.KIND_TRACK_END
            a.track_id = t.track_id
            a.label = t.label
            a.class_id = t.class_id
            a.dwell_s = t.duration_s
            a.reason = t.reason
            _box(a.box, t.box)
            yield msg

    def _event(self, pipeline: str, result: Result, bucket: _Bucket) -> pb.Event | None:
        with self._lock:
            self.offered_total += 1
            if not bucket.take():
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


def _box(target: pb.Event.Box, box: tuple[float, float, float, float]) -> None:
    target.x1, target.y1, target.x2, target.y2 = box
