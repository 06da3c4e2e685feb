"""The annotated-video sink across live stream changes: a stream added to a single-stream pipeline gets
a file of its own, a removed stream's file is finished at its removal, and a stream added again writes a
new file rather than over its first."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import av

from edgefleet.sdk import Pipeline, VideoSink


def _frames(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def _until(it: Any, seen: Counter[str], stream: str, n: int) -> None:
    while seen[stream] < n:
        seen[next(it).stream_id] += 1


def test_streams_added_and_removed_live_each_get_their_own_finished_file(
    toy_models: dict[str, Path], tmp_path: Path
) -> None:
    cam = "synthetic:?width=64&height=48&fps=30"
    out = tmp_path / "out.mp4"
    seen: Counter[str] = Counter()
    with Pipeline(toy_models["yolo"], [f"a={cam}"], sinks=[VideoSink(out)], max_batch=2) as p:
        it = p.results(timeout=60)
        _until(it, seen, "a", 5)
        p.add_source(f"b={cam}")
        _until(it, seen, "b", 10)
        p.remove_source("b")  # returns once b's last result went through the sinks
        first_b = seen["b"]
        assert _frames(tmp_path / "out-b.mp4") == first_b  # finished now, not at the pipeline's end
        p.add_source(f"b={cam}")
        _until(it, seen, "b", first_b + 5)
        p.stop()
        for r in it:
            seen[r.stream_id] += 1
    assert _frames(out) == seen["a"]  # b never wrote into a's file
    assert _frames(tmp_path / "out-b.mp4") == first_b  # nor over its own first one
    assert _frames(tmp_path / "out-b-2.mp4") == seen["b"] - first_b
