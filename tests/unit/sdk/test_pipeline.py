"""The pipeline end to end on real ONNX Runtime, with real files and synthetic cameras."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from edgefleet.sdk import (
    ConfigError,
    DecodeContext,
    Decoded,
    Decoder,
    JsonlSink,
    Pipeline,
    PipelineError,
    Result,
    VideoSink,
    register_decoder,
)


def _write_clip(path: Path, frames: int, size: tuple[int, int] = (160, 120), fps: int = 25) -> Path:
    import av

    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(frames):
            img = np.full((size[1], size[0], 3), (i * 7) % 255, np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="bgr24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def test_every_frame_of_every_stream_gets_one_result(toy_models: dict[str, Path], tmp_path: Path) -> None:
    clip = _write_clip(tmp_path / "c.mp4", 40)
    with Pipeline(
        toy_models["yolo"],
        [f"a={clip}", f"b={clip}", "c=synthetic:?width=96&height=64&frames=30&fps=200&live=false"],
        max_batch=4,
    ) as p:
        got: dict[str, list[int]] = defaultdict(list)
        for r in p.results():
            assert (r.model, r.model_version) == ("toy-yolo", "1.0.0")
            assert r.timestamp > 0 and r.latency_ms >= 0
            got[r.stream_id].append(r.sequence)
        stats = p.stats()
    assert got == {"a": list(range(40)), "b": list(range(40)), "c": list(range(30))}
    assert stats.frames_in == stats.results == 110
    assert stats.dropped == 0
    assert stats.copies_per_frame == 0.0  # files and the pattern decode straight into pool slots
    assert stats.mean_batch > 1.0  # frames of several streams share batches
    assert stats.stages["infer"].items == 110


def test_fixed_batch_model_caps_the_batch(toy_models: dict[str, Path]) -> None:
    with Pipeline(toy_models["yolo_fixed"], ["synthetic:?frames=10&fps=500&live=0"], max_batch=8) as p:
        assert p.model.max_batch == 1
        assert len(list(p.results())) == 10


def test_callback_form_and_sinks(toy_models: dict[str, Path], tmp_path: Path) -> None:
    import av

    clip = _write_clip(tmp_path / "c.mp4", 12)
    seen: list[Result] = []
    p = Pipeline(
        toy_models["yolo"],
        [str(clip)],
        on_result=seen.append,
        sinks=[JsonlSink(tmp_path / "out.jsonl"), VideoSink(tmp_path / "out.mp4")],
    )
    stats = p.run()
    assert len(seen) == 12 and stats.results == 12
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [x["seq"] for x in lines] == list(range(12))
    assert lines[0]["model"] == "toy-yolo" and lines[0]["detections"][0]["label"] == "person"
    with av.open(str(tmp_path / "out.mp4")) as c:
        v = c.streams.video[0]
        assert v.codec_context.name == "h264"
        assert sum(1 for _ in c.decode(video=0)) == 12
        assert round(float(v.average_rate)) == 25  # the source's frame rate


def test_stage_failure_surfaces_with_its_cause(toy_models: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    import yaml

    class Boom(Decoder):
        def __init__(self, ctx: DecodeContext) -> None:
            self.n = 0

        def decode(self, outputs, transforms):  # type: ignore[no-untyped-def]
            self.n += 1
            if self.n > 3:
                raise ValueError("decoder exploded")
            return [Decoded() for _ in transforms]

    register_decoder("test-boom", Boom, replace=True)
    dst = tmp_path / "p"
    shutil.copytree(toy_models["yolo"], dst)
    data = yaml.safe_load((dst / "manifest.yaml").read_text())
    data["decoder"] = {"type": "test-boom"}
    (dst / "manifest.yaml").write_text(yaml.safe_dump(data))
    p = Pipeline(dst, ["synthetic:?fps=200"])
    with pytest.raises(PipelineError, match="decoder exploded") as exc, p:
        for _ in p.results():
            pass
    assert isinstance(exc.value.__cause__, ValueError)
    assert exc.value.stage == "decode"


def test_a_source_that_fails_is_reported_failed_not_done(toy_models: dict[str, Path], tmp_path: Path) -> None:
    """`edgefleet run` showed a stream whose file could not be read as 'done'."""
    bogus = tmp_path / "clip.mp4"
    bogus.write_text("not a video")
    p = Pipeline(toy_models["yolo"], [str(bogus), "synthetic:?frames=5&live=false"])
    with pytest.raises(PipelineError, match="not a readable video file"):
        p.run()
    streams = p.stats().streams
    assert streams["s0"].failed and "not a readable video file" in (streams["s0"].last_error or "")
    assert not streams["s1"].failed


def test_a_sink_that_would_write_over_a_source_or_the_model_is_refused(
    toy_models: dict[str, Path], clip: Path, tmp_path: Path
) -> None:
    import shutil

    from edgefleet.sdk import ConfigError, JsonlSink, VideoSink

    video = tmp_path / "in.mp4"
    shutil.copy(clip, video)
    before = video.read_bytes()
    for sink in (JsonlSink(video), VideoSink(video), JsonlSink(toy_models["yolo"] / "out.jsonl")):
        p = Pipeline(toy_models["yolo"], [str(video)], sinks=[sink], max_frames=2)
        with pytest.raises(ConfigError, match="would write over"):
            p.run()
    assert video.read_bytes() == before, "the source was written over"
    assert not (toy_models["yolo"] / "out.jsonl").exists()


def test_missing_source_file_fails_start_clearly(toy_models: dict[str, Path]) -> None:
    from edgefleet.sdk import SourceError

    with pytest.raises(SourceError, match="no such file"):
        Pipeline(toy_models["yolo"], ["/nonexistent/clip.mp4"])


def test_bad_arguments_are_config_errors(toy_models: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="device"):
        Pipeline(toy_models["yolo"], ["synthetic:"], device="tpu")
    with pytest.raises(ConfigError, match="max_batch"):
        Pipeline(toy_models["yolo"], ["synthetic:"], max_batch=0)
    with pytest.raises(ConfigError, match="sources"):
        Pipeline(toy_models["yolo"], [])


def test_stop_drains_frames_in_flight(toy_models: dict[str, Path]) -> None:
    results: list[Result] = []
    p = Pipeline(toy_models["yolo"], ["synthetic:?fps=100"], on_result=results.append)
    p.start()
    time.sleep(0.5)
    p.stop()
    assert p.wait(10)
    p.close()
    stats = p.stats()
    assert stats.results == stats.frames_in - stats.dropped
    assert [r.sequence for r in results] == sorted(r.sequence for r in results)


def test_live_source_drops_oldest_under_pressure_and_counts(toy_models: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    import yaml

    class Slow(Decoder):
        def __init__(self, ctx: DecodeContext) -> None:
            pass

        def decode(self, outputs, transforms):  # type: ignore[no-untyped-def]
            time.sleep(0.05)  # 20 fps at most, against a 200 fps camera
            return [Decoded() for _ in transforms]

    register_decoder("test-slow", Slow, replace=True)
    dst = tmp_path / "p"
    shutil.copytree(toy_models["yolo"], dst)
    data = yaml.safe_load((dst / "manifest.yaml").read_text())
    data["decoder"] = {"type": "test-slow"}
    (dst / "manifest.yaml").write_text(yaml.safe_dump(data))
    seqs: list[int] = []
    p = Pipeline(dst, ["synthetic:?fps=200&width=64&height=48"], on_result=lambda r: seqs.append(r.sequence))
    p.start()
    time.sleep(1.5)
    p.stop()
    p.wait(10)
    p.close()
    stats = p.stats()
    assert stats.dropped > 50
    assert stats.frames_in == stats.results + stats.dropped
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_concurrent_stats_while_running(toy_models: dict[str, Path]) -> None:
    stop = threading.Event()
    with Pipeline(toy_models["cls"], ["synthetic:?fps=300&frames=200&live=false"], max_batch=2) as p:

        def poll() -> None:
            while not stop.is_set():
                p.stats()
                time.sleep(0.001)

        t = threading.Thread(target=poll)
        t.start()
        results = list(p.results())
        stop.set()
        t.join()
    assert len(results) == 200
    assert results[0].classifications[0].label == "class1"


def test_keep_raw_attaches_outputs(toy_models: dict[str, Path]) -> None:
    with Pipeline(toy_models["yolo"], ["synthetic:?frames=2&fps=100"], keep_raw=True) as p:
        r = next(iter(p.results()))
    assert r.raw is not None and r.raw["output0"].shape == (7, 16)


@pytest.mark.parametrize("workers", [1, 3])
def test_parallel_inference_workers_keep_each_stream_in_order(
    toy_models: dict[str, Path], tmp_path: Path, workers: int
) -> None:
    clip = _write_clip(tmp_path / "c.mp4", 60)
    with Pipeline(toy_models["yolo"], [f"a={clip}", f"b={clip}"], max_batch=2, infer_workers=workers) as p:
        assert p.infer_workers == workers
        order: dict[str, list[int]] = defaultdict(list)
        for r in p.results():
            order[r.stream_id].append(r.sequence)
    assert order == {"a": list(range(60)), "b": list(range(60))}


def test_run_with_a_callback_reraises_a_stage_failure(toy_models: dict[str, Path]) -> None:
    """run() used to return the stats of a pipeline that had died (e.g. after its first frame)."""

    def boom(result: Result) -> None:
        raise RuntimeError("callback exploded")

    p = Pipeline(toy_models["yolo"], ["synthetic:?frames=5&live=0"], on_result=boom)
    with pytest.raises(PipelineError, match="callback exploded"):
        p.run()


def test_cpu_threads_are_split_between_cpu_workers_only(tmp_path: Path) -> None:
    """Several CPU workers share the cores; on a GPU each worker's session keeps ORT's own default
    (its CPU threads only run shape glue), so the threads are not split there."""
    from edgefleet.sdk._config import PipelineConfig
    from edgefleet.sdk._pipeline import _backend_for_workers

    cpu = PipelineConfig(model=tmp_path, sources=("x.mp4",), device="cpu")
    gpu = PipelineConfig(model=tmp_path, sources=("x.mp4",), device="cuda:0")
    assert _backend_for_workers(cpu, 2).intra_op_threads is not None  # type: ignore[union-attr]
    assert _backend_for_workers(gpu, 2).intra_op_threads is None  # type: ignore[union-attr]
    assert _backend_for_workers(cpu, 1).intra_op_threads is None  # type: ignore[union-attr]


def test_a_closed_pipeline_says_so_instead_of_returning_nothing(toy_models: dict[str, Path]) -> None:
    p = Pipeline(toy_models["yolo"], ["synthetic:?frames=2&live=false"])
    p.run()
    with pytest.raises(PipelineError, match="closed"):
        p.run()
    with pytest.raises(PipelineError, match="closed"):
        list(p.results())


def test_results_timeout_is_the_longest_wait_for_one_result_not_for_all(toy_models: dict[str, Path]) -> None:
    """A camera at 10 fps: a result every ~0.1 s, 15 in all (1.5 s), each well within the 0.8 s asked
    for. (The timeout used to be spent by every empty poll of the whole run: a long, healthy run under
    load ran out of it.) A stream that stops delivering still times out."""
    with Pipeline(toy_models["yolo"], ["synthetic:?width=64&height=48&fps=10&frames=15"]) as p:
        got = list(p.results(timeout=0.8))
    assert len(got) == 15
    with Pipeline(toy_models["yolo"], ["synthetic:?width=64&height=48&fps=0.5&frames=3"]) as p:
        results = p.results(timeout=0.5)
        next(results)  # the first frame comes at once
        with pytest.raises(TimeoutError, match=r"no result within 0.5 s"):
            next(results)
