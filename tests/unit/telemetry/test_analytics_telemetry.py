"""Analytics in the agent's telemetry: zone/line/track events with a rate limit per stream, counts per
class in the periodic message with a bounded number of labels, Prometheus series, the summary that
`edgefleet telemetry show` prints."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from edgefleet.cloud._telemetry._summary import analytics_summary
from edgefleet.edge import _telemetry as tel
from edgefleet.edge._telemetry._analytics import OTHER, AnalyticsFeed
from edgefleet.edge._telemetry._config import AnalyticsEventsConfig
from edgefleet.proto.v1 import telemetry_pb2 as pb
from edgefleet.sdk._results import AnalyticsEvent, EndedTrack, RegionCounts, Result
from tests.support.telemetry_stats import pipeline_stats

BOX = (1.0, 2.0, 3.0, 4.0)


def _cross(tid: int, direction: str = "in") -> AnalyticsEvent:
    return AnalyticsEvent("cross", "gate", tid, "person", 0, BOX, direction)


def _result(stream: str, seq: int, events: tuple[AnalyticsEvent, ...] = (), **kw: Any) -> Result:
    return Result(stream, seq, 1_700_000_000.0 + seq, "det", "2.0.0", 640, 480, 1.0, events=events, **kw)


def test_events_are_limited_per_stream_and_carry_what_was_suppressed() -> None:
    now = [0.0]
    feed = AnalyticsFeed(AnalyticsEventsConfig(max_per_s=1.0, burst=2), 16, clock=lambda: now[0])
    a = [list(feed.events("p", _result("a", i, (_cross(i),)))) for i in range(5)]
    b = [list(feed.events("p", _result("b", i, (_cross(i),)))) for i in range(2)]
    assert [len(x) for x in a] == [1, 1, 0, 0, 0]  # stream a used its burst ...
    assert [len(x) for x in b] == [1, 1]  # ... and b still has its own
    now[0] = 1.0
    (msg,) = feed.events("p", _result("a", 9, (_cross(9, "out"),)))
    ev = msg.analytics
    assert (ev.kind, ev.region, ev.track_id, ev.direction, ev.suppressed) == (
        pb.Event.Analytics.KIND_LINE_CROSS,
        "gate",
        9,
        "out",
        3,
    )
    assert (ev.pipeline, ev.stream_id, ev.frame_sequence, ev.model_version) == ("p", "a", 9, "det:2.0.0")
    assert ev.captured_at.ToSeconds() == 1_700_000_009
    assert feed.suppressed_total == 3 and feed.offered_total == 8


def test_event_kinds_and_track_end_events() -> None:
    ended = EndedTrack(4, "car", 2, "class_gone", 0, 9, 10.0, 12.5, 8, BOX)
    enter = AnalyticsEvent("enter", "lobby", 3, "person", 0, BOX)
    only_tracks = AnalyticsFeed(AnalyticsEventsConfig(kinds=["track_end"]), 16)
    (msg,) = only_tracks.events("p", _result("a", 1, (enter,), ended_tracks=(ended,)))
    a = msg.analytics
    assert (a.kind, a.track_id, a.reason, a.dwell_s, a.label) == (
        pb.Event.Analytics.KIND_TRACK_END,
        4,
        "class_gone",
        2.5,
        "car",
    )
    default = AnalyticsFeed(AnalyticsEventsConfig(), 16)
    kinds = [m.analytics.kind for m in default.events("p", _result("a", 1, (enter,), ended_tracks=(ended,)))]
    assert kinds == [pb.Event.Analytics.KIND_ZONE_ENTER]  # no track_end unless asked for
    off = AnalyticsFeed(AnalyticsEventsConfig(enabled=False), 16)
    assert list(off.events("p", _result("a", 1, (enter,)))) == []


def _region(name: str, kind: str, **counts: dict[str, int]) -> RegionCounts:
    c = {k: counts.get(k, {}) for k in ("inside", "in_total", "out_total", "in_window", "out_window")}
    return RegionCounts(name, kind, ((0.0, 0.0), (1.0, 1.0)), window_s=60.0, **c)


def test_region_counts_per_label_with_a_sticky_limit() -> None:
    feed = AnalyticsFeed(AnalyticsEventsConfig(), labels_per_region=2)
    first = _region("lobby", "zone", inside={"person": 2}, in_total={"person": 5, "car": 1})
    list(feed.events("p", _result("a", 1, regions=(first,))))
    rows = {(r.name, r.label): r for r in feed.regions("p")}
    assert sorted(rows) == [("lobby", "car"), ("lobby", "person")]
    person, car = rows["lobby", "person"], rows["lobby", "car"]
    assert (person.inside, person.in_total, car.in_total) == (2, 5, 1)
    # a third label, even one counted more, goes to "other": the first two keep their own series
    later = _region("lobby", "zone", in_total={"person": 6, "car": 1, "bus": 9, "truck": 1})
    list(feed.events("p", _result("a", 2, regions=(later,))))
    rows = {r.label: r.in_total for r in feed.regions("p")}
    assert rows == {"car": 1, "person": 6, OTHER: 10}
    assert feed.regions("other-pipeline") == []


def test_telemetry_message_and_prometheus_series() -> None:
    t = pb.Telemetry()
    p = tel.pipeline_message("default", pipeline_stats())
    p.regions.add(stream_id="cam", name="lobby", kind="zone", label="person", inside=3, in_total=7, out_total=4)
    p.regions.add(stream_id="cam", name="gate", kind="line", label="person", in_total=5, out_total=2)
    p.analytics.add(stage="track", values={"tracks_active": 3})
    t.pipelines.append(p)
    reg = CollectorRegistry()
    reg.register(tel.TelemetryCollector(lambda: t, dict))
    text = generate_latest(reg).decode()
    assert 'edgefleet_zone_objects{class="person",pipeline="default",stream="cam",zone="lobby"} 3.0' in text
    where = 'class="person",direction="in",pipeline="default",stream="cam",zone="lobby"'
    assert f"edgefleet_zone_transitions_total{{{where}}} 7.0" in text
    assert (
        'edgefleet_line_crossings_total{class="person",direction="out",line="gate",pipeline="default",stream="cam"} 2.0'
        in text
    )
    assert 'edgefleet_analytics_value{name="tracks_active",pipeline="default",stage="track"} 3.0' in text


def _telemetry(gate_in: int, gate_out: int, inside: int) -> dict[str, Any]:
    t = pb.Telemetry()
    p = t.pipelines.add(name="entrance")
    p.regions.add(stream_id="lobby", name="gate", kind="line", label="person", in_total=gate_in, out_total=gate_out)
    p.regions.add(stream_id="lobby", name="hall", kind="zone", label="person", inside=inside, in_total=gate_in)
    p.analytics.add(stage="track", values={"tracks_active": 4.0})
    return json_format.MessageToDict(t)


def test_show_summary_counts_what_grew_in_the_window() -> None:
    ev = pb.Event()
    ev.analytics.stream_id = "lobby"
    ev.analytics.kind = pb.Event.Analytics.KIND_LINE_CROSS
    ev.analytics.region = "gate"
    ev.analytics.suppressed = 2
    events = [json_format.MessageToDict(ev)] * 3 + [{"swap": {}}]
    s = analytics_summary(_telemetry(12, 9, 2), _telemetry(10, 4, 0), events)
    gate = next(r for r in s["regions"] if r["name"] == "gate")
    assert (gate["in_since"], gate["out_since"], gate["in_total"], gate["out_total"]) == (2, 5, 12, 9)
    hall = next(r for r in s["regions"] if r["name"] == "hall")
    assert hall["inside"] == 2
    assert s["events"] == [{"stream": "lobby", "kind": "cross", "region": "gate", "events": 3}]
    assert s["events_suppressed"] == 6
    assert s["stages"] == [{"pipeline": "entrance", "stage": "track", "values": {"tracks_active": 4.0}}]
    restarted = analytics_summary(_telemetry(3, 1, 0), _telemetry(10, 4, 0), [])
    assert next(r for r in restarted["regions"] if r["name"] == "gate")["in_since"] == 3  # counted from zero again
    assert analytics_summary(None, None, []) == {"regions": [], "stages": [], "events": [], "events_suppressed": 0}


def test_per_version_quality_in_telemetry_and_prometheus() -> None:
    import dataclasses

    from edgefleet.sdk._quality import VersionQuality

    q1 = VersionQuality("det:1.0.0", 500, 5000, 10.0, 0.02, {"person": 0.8, "car": 0.2}, 0.4, 0.6, 0.8, 0.1, 0.09)
    q2 = VersionQuality("det:2.0.0", 90, 0, 0.0, 1.0)
    t = pb.Telemetry()
    t.pipelines.append(
        tel.pipeline_message("default", dataclasses.replace(pipeline_stats(), quality={"a": q1, "b": q2}))
    )
    assert [q.model_ref for q in t.pipelines[0].quality] == ["det:1.0.0", "det:2.0.0"]
    reg = CollectorRegistry()
    reg.register(tel.TelemetryCollector(lambda: t, dict))
    text = generate_latest(reg).decode()
    assert 'edgefleet_model_detections_per_frame{model="det:1.0.0",pipeline="default"} 10.0' in text
    assert 'edgefleet_model_empty_frame_ratio{model="det:2.0.0",pipeline="default"} 1.0' in text
    assert 'edgefleet_model_confidence_quantile{model="det:1.0.0",pipeline="default",q="0.5"} 0.6' in text
    assert 'edgefleet_model_class_share{class="person",model="det:1.0.0",pipeline="default"} 0.8' in text
    assert 'edgefleet_model_track_churn_per_frame{kind="new",model="det:1.0.0",pipeline="default"} 0.1' in text
    assert 'edgefleet_model_frames_total{model="det:2.0.0",pipeline="default"} 90.0' in text
