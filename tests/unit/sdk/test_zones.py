"""Zones and lines over tracked objects: exact line counts on scripted crossings (with detector noise and
the real tracker in front), enter / leave / dwell events and their times, windowed counts, the config's
checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pydantic import ValidationError

from edgefleet.sdk._analytics._geometry import inside_polygon, signed_distance
from edgefleet.sdk._analytics._regions import Line, Zone, ZonesConfig, ZonesStage
from edgefleet.sdk._analytics._track import TrackConfig, TrackStage
from edgefleet.sdk._results import AnalyticsEvent, Detection, EndedTrack, Result
from tests.support import scenes as S


def _run_scene(noise: S.Noise, seed: int) -> tuple[Result, list[AnalyticsEvent]]:
    actors, frames, w, h, line, _, _ = S.line_scene()
    truth = S.ground_truth(actors, frames, w, h)
    rng = np.random.default_rng(seed)
    track = TrackStage(TrackConfig())
    zones = ZonesStage(ZonesConfig(lines=(Line(name="gate", points=line),)))
    events: list[AnalyticsEvent] = []
    r = None
    for f, gt in enumerate(truth):
        d = S.detect(gt, noise, rng, w, h)
        dets = tuple(Detection(tuple(map(float, b)), float(s), 0, lb) for b, s, lb in zip(d.boxes, d.scores, d.labels))  # type: ignore[arg-type]
        (r,) = zones.process(track.process([Result("cam", f, f / 10.0, "m", "1", w, h, 0.0, dets)]))
        events += r.events
    assert r is not None
    return r, events


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "noise",
    [
        S.Noise(jitter=0.0, miss=0.0, false_per_frame=0.0, low_score=0.0),
        S.Noise(),
        S.Noise(jitter=0.05, miss=0.1, false_per_frame=1.0, low_score=0.25),
    ],
    ids=["clean", "moderate", "heavy"],
)
def test_line_counts_are_exact_on_scripted_crossings(noise: S.Noise, seed: int) -> None:
    _, _, _, _, _, want_in, want_out = S.line_scene()
    last, events = _run_scene(noise, seed)
    (gate,) = last.regions
    assert (gate.name, gate.kind) == ("gate", "line")
    assert gate.in_total == {"person": want_in} and gate.out_total == {"person": want_out}
    crossings = [(e.track_id, e.direction) for e in events]
    assert len(crossings) == want_in + want_out
    assert len({tid for tid, _ in crossings}) == want_in + want_out  # each walker counted once


def _det(x: float, y: float, tid: int, label: str = "person") -> Detection:
    return Detection((x - 20.0, y - 100.0, x + 20.0, y), 0.9, 0, label, tid, 5, "tracked")


def _at(stream: str, seq: int, *dets: Detection, ended: tuple[EndedTrack, ...] = ()) -> Result:
    return Result(stream, seq, 100.0 + seq, "m", "1", 1000, 800, 0.0, dets, ended_tracks=ended)


SQUARE = ((100.0, 100.0), (500.0, 100.0), (500.0, 500.0), (100.0, 500.0))


def test_zone_enter_dwell_leave_with_times() -> None:
    stage = ZonesStage(ZonesConfig(zones=(Zone(name="lobby", points=SQUARE, dwell_s=3.0),), window_s=5.0))
    path = [50, 150, 200, 250, 300, 350, 400, 600, 650]  # x of the feet, y = 300: enters at 1, leaves at 7
    evs = []
    for seq, x in enumerate(path):
        (r,) = stage.process([_at("a", seq, _det(x, 300, 1))])
        evs.append([(e.kind, e.track_id, round(e.dwell_s, 3)) for e in r.events])
        if seq == 5:
            (lobby,) = r.regions
            assert lobby.inside == {"person": 1} and lobby.in_total == {"person": 1}
    assert evs[1] == [("enter", 1, 0.0)]
    assert evs[4] == [("dwell", 1, 3.0)]  # inside since t=101, dwell_s=3 reached at t=104
    assert evs[7] == [("leave", 1, 6.0)]
    assert sum(len(e) for e in evs) == 3
    (lobby,) = r.regions
    assert lobby.inside == {} and lobby.out_total == {"person": 1}
    assert lobby.in_window == {} and lobby.out_window == {"person": 1}  # the entry at t=101 left the 5 s window


def test_a_track_that_ends_inside_a_zone_leaves_it() -> None:
    stage = ZonesStage(ZonesConfig(zones=(Zone(name="z", points=SQUARE),)))
    stage.process([_at("a", 0, _det(300, 300, 4))])
    gone = EndedTrack(4, "person", 0, "lost", 0, 0, 100.0, 100.5, 1, (280.0, 200.0, 320.0, 300.0))
    (r,) = stage.process([_at("a", 30, ended=(gone,))])
    (ev,) = r.events
    assert (ev.kind, ev.track_id, ev.dwell_s) == ("leave", 4, 0.5)
    assert r.regions[0].inside == {}


def test_min_frames_ignores_a_one_frame_flicker() -> None:
    stage = ZonesStage(ZonesConfig(zones=(Zone(name="z", points=SQUARE, min_frames=2),)))
    xs = [50, 150, 50, 50, 150, 160, 170, 600, 170, 600, 600]
    kinds = []
    for seq, x in enumerate(xs):
        (r,) = stage.process([_at("a", seq, _det(x, 300, 1))])
        kinds += [e.kind for e in r.events]
    assert kinds == ["enter", "leave"]  # entered at 5 (second frame inside), left at 10


def test_normalized_zone_streams_and_classes() -> None:
    cfg = ZonesConfig(
        zones=(
            Zone(name="left", points=((0, 0), (0.5, 0), (0.5, 1), (0, 1)), normalized=True, classes=("car",)),
            Zone(name="cam-b", points=SQUARE, streams=("b",)),
        )
    )
    stage = ZonesStage(cfg)
    (ra, rb) = stage.process(
        [_at("a", 0, _det(200, 300, 1, "car"), _det(300, 300, 2)), _at("b", 0, _det(200, 300, 1, "car"))]
    )
    assert [(e.region, e.track_id) for e in ra.events] == [("left", 1)]  # the person is not a car
    assert [r.name for r in ra.regions] == ["left"]
    assert ra.regions[0].points[1] == (500.0, 0.0)  # 0.5 of 1000 pixels
    assert sorted((e.region, e.track_id) for e in rb.events) == [("cam-b", 1), ("left", 1)]


def test_an_object_standing_on_a_line_is_not_counted_again_and_again() -> None:
    stage = ZonesStage(ZonesConfig(lines=(Line(name="l", points=((300, 0), (300, 800)), margin_px=3.0),)))
    xs = [250, 290, 299, 301, 299, 302, 298, 301, 310, 350]  # hovers within 3 px, then goes right
    n = 0
    for seq, x in enumerate(xs):
        (r,) = stage.process([_at("a", seq, _det(x, 300, 1))])
        n += len(r.events)
    assert n == 1
    (line,) = r.regions
    assert line.out_total == {"person": 1} and line.in_total == {}


def test_passing_beyond_the_end_of_a_line_does_not_count() -> None:
    stage = ZonesStage(ZonesConfig(lines=(Line(name="l", points=((300, 100), (300, 400))),)))
    for seq, x in enumerate([200, 280, 320, 400]):
        (r,) = stage.process([_at("a", seq, _det(x, 600, 1))])  # feet at y=600: below the line's end
        assert not r.events
    assert r.regions[0].out_total == {}


def test_line_direction_follows_the_order_of_its_points() -> None:
    down = Line(name="d", points=((0, 300), (1000, 300)))  # drawn left to right: moving down is "in"
    up = Line(name="u", points=((1000, 300), (0, 300)))
    stage = ZonesStage(ZonesConfig(lines=(down, up)))
    for seq, y in enumerate([200, 280, 320, 400]):
        (r,) = stage.process([_at("a", seq, _det(500, y, 1))])
    d, u = r.regions
    assert d.in_total == {"person": 1} and u.out_total == {"person": 1}


def test_geometry_helpers() -> None:
    pts = np.array([[150, 150], [50, 50], [499, 499], [100, 501]], float)
    assert inside_polygon(pts, np.array(SQUARE)).tolist() == [True, False, True, False]
    right = signed_distance(np.array([[5.0, 10.0]]), np.array([0.0, 0.0]), np.array([10.0, 0.0]))
    assert right[0] == pytest.approx(10.0)  # below a left-to-right line is its right-hand side


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "give at least one zone or line"),
        ({"zones": [{"name": "a", "points": [[0, 0], [1, 1], [2, 2]]}]}, "enclose no area"),
        ({"lines": [{"name": "a", "points": [[1, 1], [1, 1]]}]}, "two points are the same"),
        ({"lines": [{"name": "a", "points": [[0, 0], [1, 1]]}], "zones": [{"name": "a", "points": SQUARE}]}, "unique"),
        ({"zones": [{"name": "a", "points": [[0, 0], [2, 0], [1, 1]], "normalized": True}]}, "lie in 0..1"),
        ({"zones": [{"name": "no/slash", "points": SQUARE}]}, "name"),
        ({"lines": [{"name": "a", "points": [[0, 0], [1, 1], [2, 2]]}]}, "points"),
    ],
)
def test_zones_config_refuses_bad_regions(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ZonesConfig.model_validate(config)


def test_zones_without_a_track_stage_say_so_once(caplog: pytest.LogCaptureFixture) -> None:
    stage = ZonesStage(ZonesConfig(zones=(Zone(name="z", points=SQUARE),)))
    plain = Detection((280.0, 200.0, 320.0, 300.0), 0.9, 0, "person")
    with caplog.at_level("WARNING", logger="edgefleet.sdk"):
        for seq in range(80):
            stage.process([_at("a", seq, plain)])
    warned = [r.getMessage() for r in caplog.records if "put a {type: track} stage before zones" in r.getMessage()]
    assert len(warned) == 1


def test_a_batch_of_many_streams_equals_each_stream_alone() -> None:
    """The engine takes a batch at once (geometry for every object of it, then the bookkeeping frame by
    frame): several streams, two frames of each per batch, must give every frame the events and counts
    it gets when each stream runs alone, one frame at a time."""
    cfg = ZonesConfig(
        zones=(
            Zone(name="z", points=((0.1, 0.2), (0.6, 0.2), (0.6, 0.9), (0.1, 0.9)), normalized=True, dwell_s=3.0),
            Zone(name="slow", points=SQUARE, min_frames=2, classes=("person",)),
            Zone(name="only-b", points=SQUARE, streams=("b",)),
        ),
        lines=(
            Line(name="l", points=((400, 0), (400, 800))),
            Line(name="cars", points=((0, 350), (1000, 350)), classes=("car",)),
        ),
        window_s=5.0,
    )
    rng = np.random.default_rng(3)
    streams = ("a", "b", "c")
    walk = {s: rng.uniform([0, 0, -40, -40], [1000, 800, 40, 40], (6, 4)) for s in streams}
    frames: dict[str, list[Result]] = {s: [] for s in streams}
    for seq in range(40):
        for s in streams:
            w = walk[s]
            w[:, :2] = (w[:, :2] + w[:, 2:]) % [1000, 800]
            dets = tuple(
                _det(float(x), float(y), i + 1, "car" if i % 3 == 0 else "person")
                for i, (x, y) in enumerate(w[:, :2])
                if rng.random() > 0.1
            )
            ended = (
                (EndedTrack(9, "person", 0, "lost", 0, seq, 0.0, 0.0, 3, (0.0, 0.0, 1.0, 1.0)),) if seq == 20 else ()
            )
            r = _at(s, seq, *dets, ended=ended)
            frames[s].append(r if s != "c" else dataclasses.replace(r, frame_width=2000))  # its zone "z" is wider
    together = ZonesStage(cfg)
    alone = {s: ZonesStage(cfg) for s in streams}
    n_events = 0
    for seq in range(0, 40, 2):
        batch = [frames[s][q] for q in (seq, seq + 1) for s in streams]
        for r in together.process(batch):
            (ref,) = alone[r.stream_id].process([frames[r.stream_id][r.sequence]])
            assert (r.events, r.regions) == (ref.events, ref.regions)
            n_events += len(r.events)
    assert n_events > 50  # the walkers did enter, leave, dwell and cross


def test_frames_without_objects_still_expire_the_window_and_fire_dwell() -> None:
    """A frame with no objects on it still moves a region on: the windowed counts drop the entries that
    left the window, and an object inside (unseen on that frame) reaches its dwell time."""
    stage = ZonesStage(ZonesConfig(zones=(Zone(name="z", points=SQUARE, dwell_s=2.0),), window_s=3.0))
    (r,) = stage.process([_at("a", 0, _det(300, 300, 1))])
    assert [e.kind for e in r.events] == ["enter"] and r.regions[0].in_window == {"person": 1}
    kinds = []
    for seq in range(1, 6):  # t = 101 ... 105: nothing detected; the track is still inside
        (r,) = stage.process([_at("a", seq)])
        kinds.append([e.kind for e in r.events])
    assert kinds == [[], ["dwell"], [], [], []]  # inside since t=100: 2 s reached at t=102
    assert r.regions[0].in_window == {} and r.regions[0].in_total == {"person": 1}  # t=100 left the 3 s window
    gone = EndedTrack(1, "person", 0, "lost", 0, 5, 100.0, 105.0, 6, (280.0, 200.0, 320.0, 300.0))
    (r,) = stage.process([_at("a", 6, ended=(gone,))])
    assert [e.kind for e in r.events] == ["leave"] and r.regions[0].out_window == {"person": 1}
    for seq in range(7, 12):  # nobody inside, and the leave at t=106 leaves the window at t > 109
        (r,) = stage.process([_at("a", seq)])
    assert r.regions[0].out_window == {} and r.regions[0].out_total == {"person": 1}
