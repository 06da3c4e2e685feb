"""Analytics stages on a thread of their own (``analytics_thread``, the default): the decoding goes on
while they run, results are the same as with the stages on the decoding thread, and a failing stage
fails the pipeline with every frame slot given back."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from edgefleet.sdk import AnalyticsStage, ModelChange, Pipeline, PipelineError, Result

ROOT = Path(__file__).resolve().parents[3]
CLIP = ROOT / "models" / "media" / "vtest-300.mp4"
SYNTH = [f"cam{i}=synthetic:?width=64&height=48&frames=24&live=false" for i in range(2)]


class Recorder(AnalyticsStage):
    """Notes the thread it runs on and the threads alive; optionally waits in its first batch until
    ``release`` says so."""

    def __init__(self, release: threading.Event | None = None) -> None:
        self.threads: set[str] = set()
        self.alive: set[str] = set()
        self.release = release
        self.batches = 0

    def process(self, results: list[Result]) -> list[Result]:
        self.threads.add(threading.current_thread().name)
        self.alive |= {t.name for t in threading.enumerate() if t.name.startswith("edgefleet-")}
        self.batches += 1
        if self.release is not None and self.batches == 1:
            self.release.wait(10.0)
        return results


def _tracked(analytics_thread: bool) -> tuple[list[tuple[str, int, tuple[tuple[int | None, str], ...]]], Recorder]:
    rec = Recorder()
    with Pipeline(
        ROOT / "models" / "nanodet-m",
        [f"a={CLIP}", f"b={CLIP}"],
        max_batch=2,
        max_frames=40,
        analytics=[{"type": "track"}, rec],
        analytics_thread=analytics_thread,
    ) as p:
        out = [(r.stream_id, r.sequence, tuple((d.track_id, d.track_state) for d in r.detections)) for r in p.results()]
    return out, rec


def test_tracks_are_the_same_on_their_own_thread_as_on_the_decoding_thread() -> None:
    beside, rec_beside = _tracked(True)
    inline, rec_inline = _tracked(False)
    assert sorted(beside) == sorted(inline)  # batches may mix the two streams differently; each stream alike
    assert len(beside) == 80 and sum(1 for _, _, d in beside for tid, _ in d if tid) > 100  # people were tracked
    assert rec_beside.threads == rec_inline.threads == {"edgefleet-post"}  # the result thread, either way
    assert "edgefleet-decode" in rec_beside.alive and "edgefleet-decode" not in rec_inline.alive


def _hand_off_filled(p: Pipeline, batches: int = 2) -> int:
    """Wait (10 s at most) until ``batches`` decoded batches wait for the analytics stages; how many do."""
    deadline = time.monotonic() + 10.0
    while p.stats().queues.get("analytics", 0) < batches and time.monotonic() < deadline:
        time.sleep(0.01)
    return p.stats().queues["analytics"]


def test_decoding_goes_on_while_the_analytics_stages_work(toy_models: dict[str, Path]) -> None:
    """While the stages hold their first batch, the next ones are decoded and wait in the bounded
    hand-off queue (two batches); on the decoding thread nothing would move."""
    release = threading.Event()
    rec = Recorder(release)
    with Pipeline(toy_models["yolo"], SYNTH, max_batch=2, analytics=[rec]) as p:
        waiting = _hand_off_filled(p)
        release.set()
        results = list(p.results())
    assert waiting == 2  # full: the decoder waits for room, nothing is dropped
    assert len(results) == 48
    for stream in ("cam0", "cam1"):
        assert [r.sequence for r in results if r.stream_id == stream] == list(range(24))


class Sizes(AnalyticsStage):
    """Notes the size and the serving versions of every call, and the model changes between them; waits
    in its first call until ``release`` says so, and ``pause`` seconds in every call."""

    def __init__(self, release: threading.Event | None = None, pause: float = 0.0) -> None:
        self.release, self.pause = release, pause
        self.events: list[tuple[str, object]] = []

    def process(self, results: list[Result]) -> list[Result]:
        first = not self.events
        self.events.append(("call", [r.model_version for r in results]))
        if first and self.release is not None:
            self.release.wait(10.0)
        time.sleep(self.pause)
        return results

    def on_model_change(self, change: ModelChange) -> None:
        self.events.append(("change", change.new_version))


def test_batches_that_waited_go_through_the_stages_in_one_call(toy_models: dict[str, Path]) -> None:
    """The two batches decoded while the stages held the first one reach them as one call of four
    frames, each stream's frames still in order and each once."""
    release = threading.Event()
    sizes = Sizes(release)
    with Pipeline(toy_models["yolo"], SYNTH, max_batch=2, analytics=[sizes]) as p:
        _hand_off_filled(p)
        release.set()
        results = list(p.results())
    calls = [len(v) for kind, v in sizes.events if kind == "call"]  # type: ignore[arg-type]
    assert calls[:2] == [2, 4]  # the first batch, then the two that waited behind it
    assert sum(calls) == 48
    for stream in ("cam0", "cam1"):
        assert [r.sequence for r in results if r.stream_id == stream] == list(range(24))


def test_batches_of_two_serving_versions_never_share_a_call(toy_models: dict[str, Path]) -> None:
    """A slow stage (batches pile up behind it) across a hot swap: every call holds one version, and the
    change is heard right before the new version's first call."""
    sizes = Sizes(pause=0.02)
    streams = [f"cam{i}=synthetic:?width=64&height=48&frames=120&fps=1000&live=false" for i in range(2)]
    with Pipeline(toy_models["yolo"], streams, max_batch=2, analytics=[sizes]) as p:
        swapper = None
        results = []
        for r in p.results(timeout=60):
            results.append(r)
            if swapper is None and r.sequence == 20:
                swapper = threading.Thread(
                    target=p.swap_model, args=(toy_models["yolo_v2"],), kwargs={"health_window_s": 0.0}
                )
                swapper.start()
        assert swapper is not None
        swapper.join(30)
    calls = [v for kind, v in sizes.events if kind == "call"]
    assert max(len(v) for v in calls) > 2  # batches were merged
    assert all(len(set(v)) == 1 for v in calls)  # type: ignore[arg-type]
    at = sizes.events.index(("change", "2.0.0"))
    assert sizes.events[at - 1][1][0] == "1.0.0" and sizes.events[at + 1][1][0] == "2.0.0"  # type: ignore[index]
    assert len(results) == 240


class Breaks(AnalyticsStage):
    def __init__(self) -> None:
        self.batches = 0

    def process(self, results: list[Result]) -> list[Result]:
        self.batches += 1
        if self.batches == 3:
            raise RuntimeError("zone table corrupt")
        return results


@pytest.mark.parametrize("analytics_thread", [True, False])
def test_a_failing_stage_fails_the_pipeline_and_every_frame_slot_comes_back(
    toy_models: dict[str, Path], analytics_thread: bool
) -> None:
    p = Pipeline(toy_models["yolo"], SYNTH, max_batch=2, analytics=[Breaks()], analytics_thread=analytics_thread)
    with pytest.raises(PipelineError, match="post: zone table corrupt"):
        p.run()
    queues = p.stats().queues
    assert {k: v for k, v in queues.items() if k.startswith("pool:")} == {"pool:cam0": 0, "pool:cam1": 0}
    assert queues.get("analytics", 0) == 0
    assert not [t.name for t in p._threads if t.is_alive()]  # this pipeline's decode and result threads too
