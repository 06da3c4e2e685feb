"""Decoding in worker processes (``decode_processes``): same results as decoding on the post thread,
decoder errors surface the same way, a decoder a worker cannot rebuild stays in-process, and a worker
that dies leaves the pipeline decoding on the post thread without losing a frame."""

from __future__ import annotations

import logging
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
import yaml

from edgefleet.sdk import DecodeContext, Decoded, Decoder, Pipeline, PipelineConfig, PipelineError, register_decoder
from edgefleet.sdk._preprocess import Transform


class PidDecoder(Decoder):
    """Says which process decoded each frame."""

    def __init__(self, ctx: DecodeContext) -> None:
        self.ctx = ctx

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        return [Decoded(raw={"pid": np.array(os.getpid())}) for _ in transforms]


class ExplodingDecoder(Decoder):
    def __init__(self, ctx: DecodeContext) -> None:
        self.n = 0

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Sequence[Transform]) -> list[Decoded]:
        self.n += 1
        if self.n > 2:
            raise ValueError("decoder exploded")
        return [Decoded() for _ in transforms]


register_decoder("test-pid", PidDecoder, replace=True)
register_decoder("test-exploding", ExplodingDecoder, replace=True)


def _with_decoder(src: Path, dst: Path, kind: str) -> Path:
    shutil.copytree(src, dst)
    data = yaml.safe_load((dst / "manifest.yaml").read_text())
    data["decoder"] = {"type": kind}
    (dst / "manifest.yaml").write_text(yaml.safe_dump(data))
    return dst


def _run(model: Path, sources: list[str], **kw: object) -> dict[tuple[str, int], list[object]]:
    seen: dict[tuple[str, int], list[object]] = {}
    with Pipeline(model, sources, **kw) as p:  # type: ignore[arg-type]
        for r in p.results():
            key = (r.stream_id, r.sequence)
            assert key not in seen
            seen[key] = [(d.label, round(d.score, 5), tuple(round(v, 3) for v in d.box)) for d in r.detections]
    return seen


def test_decode_processes_give_the_same_detections(nanodet: Path, clip: Path) -> None:
    """NanoDet over the clip (two streams, batch 4): every frame once, the same detections as decoding on
    the post thread."""
    sources = [f"a={clip}", f"b={clip}"]
    want = _run(nanodet, sources, max_batch=4, max_frames=24)
    got = _run(nanodet, sources, max_batch=4, max_frames=24, decode_processes=2)
    assert len(want) == 48 and sum(len(v) for v in want.values()) > 48
    assert got == want


def test_batches_are_decoded_in_worker_processes_and_in_order(toy_models: dict[str, Path], tmp_path: Path) -> None:
    model = _with_decoder(toy_models["yolo"], tmp_path / "p", "test-pid")
    pids: set[int] = set()
    order: dict[str, list[int]] = {}
    with Pipeline(
        model,
        ["s1=synthetic:?fps=500&live=0", "s2=synthetic:?fps=500&live=0"],
        max_batch=2,
        max_frames=40,
        decode_processes=2,
    ) as p:
        for r in p.results():
            assert r.raw is not None
            pids.add(int(r.raw["pid"]))
            order.setdefault(r.stream_id, []).append(r.sequence)
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert all(seq == sorted(seq) and len(seq) == 40 for seq in order.values())


def test_a_decoder_error_in_a_worker_fails_the_decode_stage(toy_models: dict[str, Path], tmp_path: Path) -> None:
    model = _with_decoder(toy_models["yolo"], tmp_path / "p", "test-exploding")
    p = Pipeline(model, ["synthetic:?fps=200"], decode_processes=1)
    with pytest.raises(PipelineError, match="decoder exploded") as exc, p:
        for _ in p.results():
            pass
    assert exc.value.stage == "decode"
    assert isinstance(exc.value.__cause__, ValueError)


def test_a_decoder_defined_in_a_function_decodes_in_process(
    toy_models: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Local(PidDecoder):
        pass

    register_decoder("test-local", Local, replace=True)
    model = _with_decoder(toy_models["yolo"], tmp_path / "p", "test-local")
    with (
        caplog.at_level(logging.WARNING),
        Pipeline(model, ["synthetic:?live=0"], max_frames=5, decode_processes=1) as p,
    ):
        pids = {int(r.raw["pid"]) for r in p.results() if r.raw is not None}
    assert pids == {os.getpid()}
    assert "cannot be rebuilt in a decode process" in caplog.text


def test_a_dead_worker_leaves_decoding_on_the_post_thread(
    toy_models: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = _with_decoder(toy_models["yolo"], tmp_path / "p", "test-pid")
    seen: list[int] = []
    with (
        caplog.at_level(logging.ERROR),
        Pipeline(model, ["synthetic:?fps=100&live=0"], max_frames=60, decode_processes=1) as p,
    ):
        workers = list(p._decode_pool._pool._processes)  # type: ignore[union-attr]
        for r in p.results():
            seen.append(r.sequence)
            if len(seen) == 10:
                os.kill(workers[0], signal.SIGKILL)
    assert seen == list(range(60))  # every frame, once, in order
    assert "a decode process died" in caplog.text


def test_decode_processes_is_a_config_field() -> None:
    cfg = PipelineConfig.model_validate({"model": "m", "sources": ["x"], "decode_processes": 2})
    assert cfg.decode_processes == 2
    with pytest.raises(ValueError):
        PipelineConfig.model_validate({"model": "m", "sources": ["x"], "decode_processes": -1})
