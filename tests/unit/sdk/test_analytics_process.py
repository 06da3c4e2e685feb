"""The built-in analytics stages in a process of their own (``analytics_process``): the same tracks,
events and counts as in the pipeline's process, an app's own stage stays here, live changes and stream
removals reach the process, a dead process fails the pipeline with one clear error, and the process is
gone when the pipeline closes."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgefleet.sdk import AnalyticsStage, Pipeline, PipelineError, Result, Sink

ROOT = Path(__file__).resolve().parents[3]
CLIP = ROOT / "models" / "media" / "vtest-300.mp4"
ZONES: dict[str, Any] = {
    "type": "zones",
    "zones": [{"name": "lobby", "points": [[0, 300], [768, 300], [768, 576], [0, 576]]}],
    "lines": [{"name": "gate", "points": [[384, 100], [384, 500]]}],
}


def _worker_pid(p: Pipeline) -> int | None:
    assert p._post is not None
    worker = p._post.analytics.worker
    return None if worker is None else worker.pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class _SlowSink(Sink):
    """A sink slower than the inference: the result thread falls behind and batches wait for it."""

    def write(self, result: Result, frame: Any) -> None:
        time.sleep(0.04)  # 160 ms a batch of 4: slower than inference even on a loaded machine


def _clip_run(
    process: bool, thread: bool | None = None, sinks: list[Any] | None = None, overlapped: list[int] | None = None
) -> tuple[list[tuple[Any, ...]], dict[str, Any], int | None]:
    with Pipeline(
        ROOT / "models" / "nanodet-m",
        [f"a={CLIP}", f"b={CLIP}"],
        max_batch=4,
        max_frames=60,
        analytics=[{"type": "track"}, ZONES],
        analytics_process=process,
        analytics_thread=thread,
        sinks=sinks or [],
    ) as p:
        pid = _worker_pid(p)
        threads = {t.name for t in p._threads}
        # by default the stages have a thread of their own, except when they all run in the process
        assert ("edgefleet-decode" in threads) == (thread if thread is not None else not process)
        out = [
            (
                r.stream_id,
                r.sequence,
                tuple((d.box, d.label, d.track_id, d.track_age, d.track_state) for d in r.detections),
                tuple((e.track_id, e.reason, e.hits) for e in r.ended_tracks),
                tuple((e.kind, e.region, e.track_id, e.direction) for e in r.events),  # not dwell_s: capture times
                tuple((c.name, dict(c.inside), dict(c.in_total), dict(c.out_total)) for c in r.regions),
            )
            for r in p.results(timeout=120)
        ]
        stats = p.stats().analytics
        if overlapped is not None:
            assert p._post is not None
            overlapped.append(p._post.overlapped)
    return sorted(out), stats, pid


def test_the_process_gives_what_the_pipelines_own_thread_gives() -> None:
    here, stats_here, no_pid = _clip_run(False)
    there, stats_there, pid = _clip_run(True)
    assert no_pid is None and pid is not None and pid != os.getpid()
    assert there == here
    assert len(here) == 120 and sum(1 for r in here for d in r[2] if d[2]) > 200  # people were tracked
    assert sum(len(r[4]) for r in here) > 0  # and they made zone events
    assert stats_there == stats_here and stats_here["track"]["tracks_started"] > 0
    assert not _alive(pid)  # the process ended with the pipeline


def test_from_the_decoding_thread_a_batch_is_tracked_while_the_next_is_decoded() -> None:
    """``analytics_thread=False``: with batches waiting (a slow sink), a batch's request goes out before
    the next one is decoded and its answer is taken after; the results are the same as in one round trip
    each, and as in the pipeline's own process."""
    here, stats_here, _ = _clip_run(False)
    overlapped: list[int] = []
    there, stats_there, pid = _clip_run(True, thread=False, sinks=[_SlowSink()], overlapped=overlapped)
    assert overlapped[0] > 0  # it engaged (how often depends on the machine's load)
    assert there == here and stats_there == stats_here
    assert pid is not None and not _alive(pid)
    light: list[int] = []
    assert _clip_run(True, thread=False, overlapped=light)[0] == here


class _Mine(AnalyticsStage):
    """An app's own stage between two built-in ones: it runs here, on the result thread."""

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.pids: set[int] = set()
        self.tracked = 0

    def process(self, results: list[Result]) -> list[Result]:
        self.threads.add(threading.current_thread().name)
        self.pids.add(os.getpid())
        self.tracked += sum(d.track_id is not None for r in results for d in r.detections)
        return results


def test_an_apps_own_stage_stays_here_between_stages_of_the_process() -> None:
    mine = _Mine()
    with Pipeline(
        ROOT / "models" / "nanodet-m",
        [f"a={CLIP}"],
        max_batch=2,
        max_frames=30,
        analytics=[{"type": "track"}, mine, ZONES],
        analytics_process=True,
    ) as p:
        results = list(p.results(timeout=120))
    assert mine.threads == {"edgefleet-post"} and mine.pids == {os.getpid()}
    assert mine.tracked > 0
    assert all(len(r.regions) == 2 for r in results)  # zones ran (in the process) after it


def test_live_changes_and_stream_removals_reach_the_process(toy_models: dict[str, Path]) -> None:
    cams = [f"c{i}=synthetic:?width=64&height=48&fps=30&queue=64" for i in range(2)]
    zone = {"type": "zones", "zones": [{"name": "all", "points": [[0, 0], [1, 0], [1, 1], [0, 1]], "normalized": True}]}
    with Pipeline(toy_models["yolo"], cams, max_batch=2, analytics=[{"type": "track"}], analytics_process=True) as p:
        it = p.results(timeout=60)
        pid = _worker_pid(p)
        _take(it, 20)
        before = p.stats().analytics["track"]["tracks_active"]
        name = p.add_analytics(zone)
        got = _take(it, 20)
        assert any(r.regions and r.regions[0].name == "all" for r in got)
        p.remove_source("c1")
        got = _take(it, 20)
        assert {r.stream_id for r in got[-10:]} == {"c0"}
        assert 0 < p.stats().analytics["track"]["tracks_active"] < before  # c1's tracks were let go of there
        p.remove_analytics(name)
        got = _take(it, 20)
        assert not got[-1].regions and got[-1].detections[0].track_id is not None
        assert _worker_pid(p) == pid  # one process all along
        p.stop()
        list(it)
    assert pid is not None and not _alive(pid)


def _take(it: Any, n: int) -> list[Result]:
    return [next(it) for _ in range(n)]


def test_a_dead_analytics_process_fails_the_pipeline_with_one_clear_error(toy_models: dict[str, Path]) -> None:
    cams = ["c0=synthetic:?width=64&height=48&fps=30&queue=64"]
    with Pipeline(toy_models["yolo"], cams, max_batch=2, analytics=[{"type": "track"}], analytics_process=True) as p:
        it = p.results(timeout=60)
        _take(it, 4)
        pid = _worker_pid(p)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        with pytest.raises(PipelineError, match=r"analytics process exited \(code -9\)"):
            while time.monotonic() < deadline:
                next(it)


def test_a_request_made_while_a_batch_is_in_flight_keeps_that_batchs_answer() -> None:
    """send() then another request (a live change opening a stage) before take(): the change gets its own
    answer, the batch its own, in the order the process handled them."""
    from edgefleet.sdk._analytics import ANALYTICS, AnalyticsContext
    from edgefleet.sdk._analytics._base import build_stage
    from edgefleet.sdk._analytics._remote import AnalyticsProcess, RemoteStage
    from edgefleet.sdk._detections import Detections

    worker = AnalyticsProcess()
    track = RemoteStage(worker, ANALYTICS.coerce({"type": "track"}))
    zones = RemoteStage(worker, ANALYTICS.coerce(ZONES))
    ctx = AnalyticsContext(("a",), "m", "1", ("person",))
    try:
        track.open(ctx)
        boxes = Detections(
            np.array([[10.0, 10.0, 50.0, 90.0]], np.float32),
            np.array([0.9], np.float32),
            np.zeros(1, np.int64),
            ("person",),
        )
        batch = [Result("a", i, float(i), "m", "1", 768, 576, 1.0, boxes) for i in range(3)]
        sent = worker.send([track], batch)
        zones.open(ctx)  # answered after the batch's answer, which it keeps for the take
        out = worker.take(sent)
        here = build_stage(ANALYTICS.coerce({"type": "track"}))
        here.open(ctx)
        expected = [r.detections[0].track_id for r in here.process(batch)]
        assert [r.detections[0].track_id for r in out] == expected and expected[-1] == 1
        assert worker.process([track, zones], batch[:1])[0].regions  # both stages there now
        with pytest.raises(Exception, match="taken twice"):
            worker.take(sent)
    finally:
        worker.stop()


def test_the_result_thread_takes_the_answer_or_the_next_batch_whichever_comes_first() -> None:
    """With a batch in the analytics process: its answer first means deliver now (no latency added to a
    light pipeline); the next batch first (the process held up here by SIGSTOP) means decode that one
    meanwhile, also when it was not waiting yet as the batch went out."""
    import queue

    from edgefleet.sdk._analytics import ANALYTICS, AnalyticsContext
    from edgefleet.sdk._analytics._remote import AnalyticsProcess, RemoteStage
    from edgefleet.sdk._delivery import next_batch_first
    from edgefleet.sdk._detections import Detections

    worker = AnalyticsProcess()
    track = RemoteStage(worker, ANALYTICS.coerce({"type": "track"}))
    boxes = Detections(
        np.array([[10.0, 10.0, 50.0, 90.0]], np.float32),
        np.array([0.9], np.float32),
        np.zeros(1, np.int64),
        ("person",),
    )
    batch = [Result("a", 0, 0.0, "m", "1", 768, 576, 1.0, boxes)]
    inbox: queue.Queue[Any] = queue.Queue()
    abort = threading.Event()
    try:
        track.open(AnalyticsContext(("a",), "m", "1", ("person",)))
        sent = worker.send([track], batch)
        assert next_batch_first(lambda t: worker.answered(sent, t), inbox, abort) is False  # the answer came
        assert worker.take(sent)[0].detections[0].track_state == "tentative"  # the tracker saw it
        pid = worker.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            sent = worker.send([track], batch)
            threading.Timer(0.2, inbox.put, ("next batch",)).start()  # arrives while the answer is held up
            t0 = time.monotonic()
            assert next_batch_first(lambda t: worker.answered(sent, t), inbox, abort) is True
            assert 0.15 < time.monotonic() - t0 < 5
            assert not worker.answered(sent, 0.05)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert worker.answered(sent, 5.0) and len(worker.take(sent)) == 1
        sent = worker.send([track], batch)
        inbox.put("a batch waiting already")
        assert next_batch_first(lambda t: pytest.fail("polled with a batch waiting"), inbox, abort) is True
        worker.take(sent)
        sent = worker.send([track], batch)
        abort.set()  # an aborting pipeline does not wait for the answer either
        assert next_batch_first(lambda t: False, queue.Queue(), abort) is True
        worker.take(sent)
    finally:
        worker.stop()


def test_the_decoders_columns_and_the_answer_in_place_match_the_general_path() -> None:
    """The pipeline's two shortcuts on the wire: a batch straight from the decoder is sent as the decoder's
    columns (not joined again from its frames), and the answer is attached to results nobody else holds
    in place (not into copies). Each gives what the general path gives."""
    from edgefleet.sdk._analytics._base import ANALYTICS
    from edgefleet.sdk._analytics._runner import AnalyticsRunner
    from edgefleet.sdk._analytics._wire import apply_reply, decode_batch, encode_batch, encode_reply
    from edgefleet.sdk._decoders import BatchColumns
    from edgefleet.sdk._detections import unchecked
    from edgefleet.sdk._results import new_result

    rng = np.random.default_rng(7)
    labels = ("person", "car")
    counts = [3, 0, 5, 2]
    total = sum(counts)
    xy = rng.uniform(0, 600, (total, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + 40], axis=1)
    scores, classes = rng.uniform(0.5, 1, total).astype(np.float32), rng.integers(0, 2, total)
    starts = [0, *np.cumsum(counts).tolist()]
    columns = BatchColumns(boxes, scores, classes, labels, classes, starts)

    def batch() -> list[Result]:
        return [
            new_result(f"cam{i}", 7, 1.0, "m", "1", 768, 576, 2.0,
                       unchecked(boxes[lo:hi], scores[lo:hi], classes[lo:hi], labels, None, None))
            for i, (lo, hi) in enumerate(itertools.pairwise(starts))
        ]  # fmt: skip

    general, direct = encode_batch(batch()), encode_batch(batch(), columns)
    for name in ("streams", "sequences", "offsets", "tables", "table_of", "tracked", "ended", "track"):
        assert getattr(direct, name) == getattr(general, name), name
    for name in ("boxes", "scores", "class_ids", "label_index"):
        a, b = getattr(direct, name), getattr(general, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name

    runner = AnalyticsRunner.build([ANALYTICS.coerce({"type": "track"}), ANALYTICS.coerce(ZONES)])
    runner.open([f"cam{i}" for i in range(4)], ("m", "1", labels))
    given = decode_batch(general)
    reply = encode_reply(given, runner.process(given), {})
    copies, mine, theirs = batch(), batch(), batch()
    own = [r.detections for r in theirs]
    copied = apply_reply(copies, reply, general.offsets, {})
    filled = apply_reply(mine, reply, general.offsets, {}, in_place=True)
    tracked = apply_reply(theirs, reply, general.offsets, {}, in_place=True, own_detections=True)
    assert all(a is b for a, b in zip(filled, mine, strict=True))  # the same objects, filled
    assert all(r.detections is d for r, d in zip(tracked, own, strict=True))  # their own detections, tracked
    assert filled == copied == tracked
    ids = [r.detections.track_ids.tolist() for r in copied]  # type: ignore[attr-defined]
    for each in (filled, tracked):
        assert [r.detections.track_ids.tolist() for r in each] == ids  # type: ignore[attr-defined]
    assert any(ids) and all(r.detections.tracked for r in tracked if r.detections)  # type: ignore[attr-defined]
    assert sum(len(r.regions) for r in filled) > 0


def test_a_batch_and_its_answer_cross_the_wire_as_they_were() -> None:
    """Both directions pickle their arrays as bytes of fixed types (not as arrays): what comes out of the
    wire equals what went in, field by field and type by type, with and without track columns, empty
    frames included; the arrays that come out are read-only (they are the message's bytes)."""
    import pickle

    from edgefleet.sdk._analytics._wire import WireReply, encode_batch
    from edgefleet.sdk._detections import unchecked
    from edgefleet.sdk._results import EndedTrack, new_result

    labels = ("person", "car")
    boxes = np.arange(20, dtype=np.float32).reshape(5, 4)
    scores, classes = np.linspace(0.5, 0.9, 5, dtype=np.float32), np.array([0, 1, 0, 0, 1])
    track = (np.arange(1, 6), np.full(5, 3), np.array([1, 1, 3, 0, 1], np.int8))
    ended = (EndedTrack(9, "car", 1, "lost", 0, 4, 1.0, 2.0, 5, (1.0, 2.0, 3.0, 4.0)),)
    frames = [
        new_result("a", 1, 1.0, "m", "1", 640, 480, 0.0,
                   unchecked(boxes[:3], scores[:3], classes[:3], labels, None, None)),
        new_result("b", 2, 2.0, "m", "1", 640, 480, 0.0, ()),
        new_result("c", 3, 3.0, "m", "2", 320, 240, 0.0,
                   unchecked(boxes[3:], scores[3:], classes[3:], labels, None, tuple(t[3:] for t in track)),
                   ended_tracks=ended),
    ]  # fmt: skip
    for sent in (encode_batch(frames[:2]), encode_batch(frames)):
        came = pickle.loads(pickle.dumps(sent, protocol=pickle.HIGHEST_PROTOCOL))
        for name, value in vars(sent).items():
            got = getattr(came, name)
            if isinstance(value, np.ndarray):
                assert got.dtype == value.dtype and got.shape == value.shape and np.array_equal(got, value), name
                assert not got.flags.writeable, name
            elif name == "track" and value is not None:
                assert [(a.dtype, a.tolist()) for a in got] == [(a.dtype, a.tolist()) for a in value]
            else:
                assert got == value, name
    assert came.track is not None and came.ended == {2: ended}
    for reply in (WireReply(None, [False], {}, {}, {}), WireReply(track, [True, True], {1: ended}, {}, {})):
        back = pickle.loads(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
        assert (back.tracked, back.ended, back.events, back.regions) == (reply.tracked, reply.ended, {}, {})
        if reply.track is None:
            assert back.track is None
        else:
            assert back.track is not None
            assert [(a.dtype, a.tolist()) for a in back.track] == [(a.dtype, a.tolist()) for a in reply.track]


def test_the_answers_records_cross_the_wire_whole_through_their_makers() -> None:
    """Zone and line counts, events and ended tracks come back from the analytics process made again by a
    maker per class that sets each slot by name: every field arrives, with its value and type, and a
    maker's parameters are its class's fields in order (a field added to a record without its maker
    fails here, not as a record missing a slot in a pipeline)."""
    import dataclasses
    import inspect
    import pickle

    from edgefleet.sdk._results import _MAKERS, AnalyticsEvent, EndedTrack, RegionCounts

    box = (1.0, 2.0, 3.0, 4.0)
    records = [
        EndedTrack(9, "car", 1, "class_gone", 3, 40, 1.5, 2.75, 31, box),
        AnalyticsEvent("leave", "door", 7, "person", 0, box, "", 4.25),
        AnalyticsEvent("cross", "gate", 8, "car", 1, box, "out"),
        RegionCounts("door", "zone", ((0.0, 0.0), (9.5, 0.0), (9.5, 7.0)), {"person": 2}, {"person": 5},
                     {"person": 3}, {}, {"car": 1}, 30.0),
    ]  # fmt: skip
    assert set(_MAKERS) == {type(r) for r in records}
    for cls, make in _MAKERS.items():
        params = [p for p in inspect.signature(make).parameters if not p.startswith("_")]
        assert params == [f.name for f in dataclasses.fields(cls)], cls.__name__
    for record in records:
        back = pickle.loads(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
        assert type(back) is type(record) and back == record
        for f in dataclasses.fields(record):
            assert type(getattr(back, f.name)) is type(getattr(record, f.name)), f.name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(back, dataclasses.fields(back)[0].name, None)  # still frozen


def test_the_pipelines_end_of_the_socket_frames_messages_as_the_process_reads_them() -> None:
    """The pipeline's end (``Channel``: one sendmsg out, one recv_into in when a message is there whole)
    and the process's plain ``multiprocessing`` Connection: messages of any size both ways, two arriving
    in one read kept apart, nothing there in time is a TimeoutError, the other end gone an EOFError."""
    import socket
    from multiprocessing.connection import Connection

    from edgefleet.sdk._analytics._channel import Channel

    mine, theirs = socket.socketpair()
    here, there = Channel(mine, buffer=4096), Connection(theirs.detach())
    big = bytes(range(256)) * 12_000  # 3 MB: past the buffer, read in pieces
    try:
        for payload in (b"", b"x", big):
            sender = threading.Thread(target=here.send, args=(payload,))  # 3 MB fill the socket's buffers
            sender.start()
            assert there.recv_bytes() == payload
            sender.join()
        writer = threading.Thread(target=there.send_bytes, args=(big,))
        writer.start()
        assert here.recv(10.0) == big
        writer.join()
        there.send_bytes(b"first")
        there.send_bytes(b"second")
        time.sleep(0.1)  # both in the socket: one read takes them
        assert here.ready(0.0) and here.recv(1.0) == b"first"
        assert here.ready(0.0) and here.recv(1.0) == b"second"
        assert not here.ready(0.05)
        with pytest.raises(TimeoutError):
            here.recv(0.05)
        there.close()
        assert here.ready(1.0)  # the end of the stream wakes a waiter too
        with pytest.raises(EOFError):
            here.recv(1.0)
    finally:
        here.close()
