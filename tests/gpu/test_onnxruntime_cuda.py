"""ONNX Runtime on the GPU: IOBinding on device buffers, CUDA graphs, GPU candidate filtering, and the
pipeline's copy accounting (one upload per CPU-decoded frame, none with NVDEC)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgefleet.sdk import OnnxRuntimeConfig, Pipeline, load_package
from edgefleet.sdk._model import load_model
from edgefleet.sdk._sparse import CandidateFilter

pytestmark = pytest.mark.gpu


def _fill(model: object, rng: np.random.Generator) -> np.ndarray:
    buf = model.buffers.get_nowait()  # type: ignore[attr-defined]
    host = rng.standard_normal(buf.array.shape).astype(buf.array.dtype)
    return host, buf


def test_iobinding_matches_cpu(ort_cuda: str, nanodet: Path) -> None:
    pkg = load_package(nanodet)
    gpu = load_model(pkg, OnnxRuntimeConfig(), device=ort_cuda, max_batch=4, warmup=False)
    cpu = load_model(pkg, OnnxRuntimeConfig(), device="cpu", max_batch=4, warmup=False)
    assert "CUDAExecutionProvider" in gpu.backend.providers  # type: ignore[attr-defined]
    gpu.backend._candidates.clear()  # type: ignore[attr-defined]  # the full tensors (filters: below)
    rng = np.random.default_rng(0)
    gbuf = gpu.buffers.get_nowait()
    assert gbuf.device.startswith("cuda")
    cbuf = cpu.buffers.get_nowait()
    host = rng.standard_normal(cbuf.array.shape).astype(np.float32)
    cbuf.array[...] = host
    gbuf.array.copy_from_host(host)
    for n in (4, 1, 3):
        g = gpu.backend.infer(gbuf, n)
        assert gbuf.handle.bound == {0: 4}  # pad_batch: one input shape whatever the batch size
        c = cpu.backend.infer(cbuf, n)
        assert set(g) == set(c)
        for name in c:
            assert g[name].shape == c[name].shape
            np.testing.assert_allclose(g[name], c[name], atol=2e-3, rtol=1e-2)
    gpu.close()
    cpu.close()


def test_host_buffers_on_the_cuda_provider_run_at_one_shape(ort_cuda: str, nanodet: Path) -> None:
    """io_binding off (or no cuda-python): ORT's CUDA EP from host arrays, every run padded to the
    buffer's size like the device path (the EP re-plans on each new shape); the rows asked for match the CPU."""
    pkg = load_package(nanodet)
    gpu = load_model(pkg, OnnxRuntimeConfig(io_binding=False), device=ort_cuda, max_batch=4, warmup=False)
    cpu = load_model(pkg, OnnxRuntimeConfig(), device="cpu", max_batch=4, warmup=False)
    backend = gpu.backend
    assert "CUDAExecutionProvider" in backend.providers  # type: ignore[attr-defined]
    assert backend._gpu_from_host  # type: ignore[attr-defined]
    session, shapes = backend._session, []  # type: ignore[attr-defined]

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(session, name)

        def run(self, names: object, feed: dict[str, np.ndarray]) -> object:
            shapes.append(next(iter(feed.values())).shape[0])
            return session.run(names, feed)

    backend._session = Spy()  # type: ignore[attr-defined]
    gbuf, cbuf = gpu.buffers.get_nowait(), cpu.buffers.get_nowait()
    host = np.random.default_rng(2).standard_normal(cbuf.array.shape).astype(np.float32)
    gbuf.array[...] = host
    cbuf.array[...] = host
    for n in (4, 1, 3):
        g, c = backend.infer(gbuf, n), cpu.backend.infer(cbuf, n)
        for name in c:
            assert g[name].shape == c[name].shape
            np.testing.assert_allclose(g[name], c[name], atol=2e-3, rtol=1e-2)
    assert shapes == [4, 4, 4]
    gpu.close()
    cpu.close()


def test_cuda_graph_replay_matches(ort_cuda: str, nanodet: Path) -> None:
    pkg = load_package(nanodet)
    plain = load_model(pkg, OnnxRuntimeConfig(), device=ort_cuda, max_batch=2, warmup=False)
    graph = load_model(pkg, OnnxRuntimeConfig(cuda_graph=True), device=ort_cuda, max_batch=2, warmup=False)
    rng = np.random.default_rng(1)
    a, b = plain.buffers.get_nowait(), graph.buffers.get_nowait()
    host = rng.standard_normal(a.array.shape).astype(np.float32)
    a.array.copy_from_host(host)
    b.array.copy_from_host(host)
    for _ in range(3):  # capture, then replays
        ref = plain.backend.infer(a, 2)
        got = graph.backend.infer(b, 2)
        for name in ref:
            np.testing.assert_allclose(got[name], ref[name], atol=2e-3, rtol=1e-2)
    plain.close()
    graph.close()


def test_gpu_candidate_filter_gives_cpu_detections(ort_cuda: str, tmp_path: Path) -> None:
    from tests.support.onnx_models import yolo_package

    pkg = load_package(yolo_package(tmp_path / "y"))
    gpu = load_model(pkg, OnnxRuntimeConfig(), device=ort_cuda, max_batch=2, warmup=False)
    # the toy model has few anchors: force a 4-column filter so it engages (3 boxes pass the threshold)
    out = gpu.backend.outputs[0]  # type: ignore[attr-defined]
    assert gpu.backend.filter_candidates(
        CandidateFilter(out.name, 0.25, "channels_first", out.shape[1] - 4, capacity=4)
    )
    frames = [np.full((48, 64, 3), 90, np.uint8), np.full((64, 64, 3), 30, np.uint8)]
    got = _run_model(gpu, frames)
    cpu = load_model(pkg, OnnxRuntimeConfig(), device="cpu", max_batch=2, warmup=False)
    want = _run_model(cpu, frames)
    for g, w in zip(got, want, strict=True):
        assert [d.label for d in g.detections] == [d.label for d in w.detections]
        for dg, dw in zip(g.detections, w.detections, strict=True):
            assert dg.score == pytest.approx(dw.score, abs=1e-4)
            np.testing.assert_allclose(dg.box, dw.box, atol=0.5)
    gpu.close()
    cpu.close()


def test_cuda_graph_is_refused_for_outputs_of_unknown_shape(
    ort_cuda: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ORT allocates such outputs on the first run, which a graph would capture: graphs stay off (with a
    warning) and every buffer's detections equal the CPU's."""
    from tests.support.onnx_models import yolo_package

    pkg = load_package(yolo_package(tmp_path / "y", symbolic_anchors=True))
    with caplog.at_level("WARNING"):
        gpu = load_model(pkg, OnnxRuntimeConfig(cuda_graph=True), device=ort_cuda, max_batch=2, warmup=False)
    assert "cuda_graph is off" in caplog.text
    cpu = load_model(pkg, OnnxRuntimeConfig(), device="cpu", max_batch=2, warmup=False)
    frames = [np.full((48, 64, 3), 90, np.uint8), np.full((64, 64, 3), 30, np.uint8)]
    want = _run_model(cpu, frames)
    for _ in range(6):  # every buffer, twice
        got = _run_model(gpu, frames)
        assert [[(d.label, round(d.score, 4)) for d in g.detections] for g in got] == [
            [(d.label, round(d.score, 4)) for d in w.detections] for w in want
        ]
    assert not any(b.handle.graphs for b in gpu.buffers.queue)  # type: ignore[attr-defined]
    gpu.close()
    cpu.close()


def test_symbolic_output_dims_are_learned_then_bound_and_filtered(ort_cuda: str, tmp_path: Path) -> None:
    """An exporter's symbolic anchor dimension: ORT allocates the output on the first run, then it is
    preallocated and bound, and the GPU candidate filter engages; detections equal the CPU's every time."""
    from tests.support.onnx_models import yolo_package

    pkg = load_package(yolo_package(tmp_path / "y", symbolic_anchors=True))
    gpu = load_model(pkg, OnnxRuntimeConfig(), device=ort_cuda, max_batch=2, warmup=False, buffers=1)
    out = gpu.backend.outputs[0]  # type: ignore[attr-defined]
    assert out.shape[2] <= 0  # unknown to ORT before a run
    assert gpu.backend.filter_candidates(CandidateFilter(out.name, 0.25, "channels_first", len(pkg.labels), capacity=4))
    cpu = load_model(pkg, OnnxRuntimeConfig(), device="cpu", max_batch=2, warmup=False)
    frames = [np.full((48, 64, 3), 90, np.uint8), np.full((64, 64, 3), 30, np.uint8)]
    want = _run_model(cpu, frames)
    bindings = [b.handle for b in gpu.buffers.queue]  # type: ignore[attr-defined]
    assert all(b.candidate_counts is None for b in bindings)
    for _ in range(2 * len(bindings)):  # each buffer: a first run (ORT allocates), then a bound one
        got = _run_model(gpu, frames)
        for g, w in zip(got, want, strict=True):
            assert [(d.label, round(d.score, 4)) for d in g.detections] == [
                (d.label, round(d.score, 4)) for d in w.detections
            ]
    for b in bindings:
        assert b.outputs[out.name] is not None  # learned on its first run
        assert b.candidate_counts.tolist() == [3, 3]  # then filtered on the GPU
    gpu.close()
    cpu.close()


def _clip_frames(clip: Path, count: int) -> list[np.ndarray]:
    import cv2

    cap = cv2.VideoCapture(str(clip))
    frames = []
    while len(frames) < count:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f)
    cap.release()
    return frames


def _same_detections(got: list[object], want: list[object]) -> None:
    """Same classes and scores in the same order; boxes equal to float32 rounding (GPU box decoding)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        gd, wd = g.detections, w.detections  # type: ignore[attr-defined]
        assert [(d.class_id, d.score) for d in gd] == [(d.class_id, d.score) for d in wd]
        for a, b in zip(gd, wd, strict=True):
            np.testing.assert_allclose(a.box, b.box, atol=1e-3)


def test_nanodet_gpu_candidates_decode_like_the_full_tensors(ort_cuda: str, nanodet: Path, clip: Path) -> None:
    """NanoDet's strides are decoded on the GPU into (cell, class, score, box) records; the detections
    equal those from the full tensors of the same session, and the records equal the host reference of
    the kernel on those tensors. The thresholded-rows filter still gives the full tensors' rows."""
    import dataclasses

    from edgefleet.sdk._sparse import BoxCandidates, CandidateRows, ConsumedOutput
    from tests.support.gfl_reference import gfl_nms_reference, gfl_records

    pkg = load_package(nanodet)
    model = load_model(pkg, OnnxRuntimeConfig(), device=ort_cuda, max_batch=4, warmup=False, buffers=1)
    backend = model.backend
    filters = dict(backend._candidates)  # type: ignore[attr-defined]
    assert set(filters) == {"cls_8", "cls_16", "cls_32"} and {f.layout for f in filters.values()} == {"gfl"}
    frames = _clip_frames(clip, 4)
    frames[2] = np.zeros_like(frames[2])  # a black frame
    for n in (4, 3):
        backend._candidates = {}  # type: ignore[attr-defined]
        want = _run_model(model, frames[:n])
        backend._candidates = filters  # type: ignore[attr-defined]
        got = _run_model(model, frames[:n])
        _same_detections(got, want)
        assert sum(len(d.detections) for d in want) >= 3  # type: ignore[attr-defined]
    buf = model.buffers.get_nowait()  # type: ignore[attr-defined]
    for i, f in enumerate(frames):
        model.preprocess(f, buf, i)
    model.preprocess.finish(buf, 4)
    final = backend.infer(buf, 4)
    backend._candidates = {k: dataclasses.replace(f, nms_iou=None) for k, f in filters.items()}  # type: ignore[attr-defined]
    sparse = backend.infer(buf, 4)  # the records, NMS left to the host
    backend._candidates = {}  # type: ignore[attr-defined]
    dense = backend.infer(buf, 4)
    rows_filters = {
        k: CandidateFilter(f.output, f.threshold, "rows", companion=f.companion) for k, f in filters.items()
    }
    backend._candidates = rows_filters  # type: ignore[attr-defined]
    rowwise = backend.infer(buf, 4)
    model.buffers.put_nowait(buf)  # type: ignore[attr-defined]
    got_b, ref = sparse["cls_8"], gfl_records(dense, list(filters.values()))["cls_8"]
    assert isinstance(got_b, BoxCandidates) and isinstance(ref, BoxCandidates)
    assert isinstance(sparse["reg_32"], ConsumedOutput) and not got_b.nonfinite.any()
    assert got_b.frame.size > 10 and (got_b.frame == 2).sum() == 0
    for a in ("frame", "cell", "cls", "score"):
        np.testing.assert_array_equal(getattr(got_b, a), getattr(ref, a))
    np.testing.assert_allclose(got_b.box, ref.box, atol=1e-3, rtol=1e-5)
    fin, want_fin = final["cls_16"], gfl_nms_reference(sparse["cls_16"], filters["cls_16"])
    assert isinstance(fin, BoxCandidates) and fin.final and not got_b.final
    assert 0 < fin.frame.size < got_b.frame.size
    for a in ("frame", "cell", "cls", "score", "box"):
        np.testing.assert_array_equal(getattr(fin, a), getattr(want_fin, a))
    ts = [model.preprocess.transform_for(f.shape[1], f.shape[0]) for f in frames]  # type: ignore[attr-defined]
    assert model.decoder.decode(final, ts) == model.decoder.decode(sparse, ts)  # type: ignore[attr-defined]
    for name in ("cls_8", "reg_8", "cls_32", "reg_32"):
        rows = rowwise[name]
        assert isinstance(rows, CandidateRows)
        assert rows.data.shape[1] < dense[name].shape[1]  # far fewer rows came back
        for i in range(4):
            keep = rows.index[i][rows.index[i] >= 0]
            assert np.all(np.diff(keep) > 0)  # anchor order
            np.testing.assert_array_equal(rows.data[i, : len(keep)], dense[name][i][keep])
    threshold = model.decoder.p.score_threshold  # type: ignore[attr-defined]
    kept = dense["cls_8"].max(axis=2) >= threshold
    assert rowwise["cls_8"].counts().tolist() == kept.sum(axis=1).tolist()
    np.testing.assert_array_equal(np.asarray(rowwise["cls_8"]), np.where(kept[:, :, None], dense["cls_8"], 0))
    model.close()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("multi_label", [True, False])
def test_gfl_kernel_matches_the_reference(gpu: str, dtype: type, multi_label: bool) -> None:
    """Two strides appending to one set of records: the same (frame, cell, class) records as the host
    reference, scores exact, boxes to float32 rounding; ties go to the lower class; a frame with a NaN
    score is marked; a capacity too small for a frame means the full tensors (fetch gives None)."""
    import dataclasses

    from edgefleet.sdk._backends._ort_cuda import _GflPlan
    from edgefleet.sdk._cuda._array import DeviceArray
    from edgefleet.sdk._cuda._bindings import Stream
    from edgefleet.sdk._cuda._memory import pinned_array
    from tests.support.gfl_reference import gfl_nms_reference, gfl_records

    rng = np.random.default_rng(7)
    grids = [(6, 5, 8), (3, 3, 16)]  # rows, columns, stride
    dense: dict[str, np.ndarray] = {}
    filters = []
    first = 0
    for i, (gh, gw, s) in enumerate(grids):
        sc = rng.uniform(0, 1, (3, gh * gw, 7)).astype(dtype)
        sc[0, 4, :] = 0.9  # a tie across every class
        dense[f"s{i}"], dense[f"r{i}"] = sc, rng.normal(0, 2, (3, gh * gw, 32)).astype(dtype)
        filters.append(
            CandidateFilter(
                f"s{i}", 0.6, "gfl", companion=f"r{i}", capacity=512, stride=s, grid_width=gw, first=first,
                bins=8, multi_label=multi_label, levels=2,
            )
        )  # fmt: skip
        first += gh * gw
    dense["s1"][2, 0, 3] = np.nan
    levels = []
    for f in filters:
        sc, reg = dense[f.output], dense[str(f.companion)]
        levels.append((f, DeviceArray.empty(sc.shape, dtype, 0), DeviceArray.empty(reg.shape, dtype, 0)))
    for f, arr, comp in levels:
        arr.copy_from_host(dense[f.output])
        comp.copy_from_host(dense[str(f.companion)])
    stream = Stream(0)

    def ok_g_count(b: object) -> int:
        return int((b.frame < 2).sum())  # type: ignore[attr-defined]

    def run_nms(nms_levels: list[Any], f: CandidateFilter) -> Any:
        out = DeviceArray.empty((3, f.max_detections, 8), np.float32, 0)
        mask = None
        if f.keep_classes is not None:
            mask = DeviceArray.empty((7,), np.uint8, 0)
            ok = np.zeros(7, np.uint8)
            ok[list(f.keep_classes)] = 1
            mask.copy_from_host(ok)
        plan = _GflPlan(nms_levels, DeviceArray.empty((3, 512, 8), np.float32, 0), 512, 0, (out, mask))
        counts = DeviceArray.zeros((3, 3), np.int32, 0)
        plan.launch(counts.ptr, 3 * 4, 3, stream.handle)
        stream.synchronize()
        fetch = plan.fetch(counts.copy_to_host(), stream.raw, lambda key, nbytes: pinned_array((nbytes,), np.uint8))
        stream.synchronize()
        assert fetch is not None and fetch.final
        return fetch.finish()["s0"]

    def run(capacity: int) -> object:
        plan = _GflPlan(levels, DeviceArray.empty((3, capacity, 8), np.float32, 0), capacity, 0)
        counts = DeviceArray.zeros((3, 3), np.int32, 0)
        plan.launch(counts.ptr, 3 * 4, 3, stream.handle)
        stream.synchronize()
        fetch = plan.fetch(counts.copy_to_host(), stream.raw, lambda key, nbytes: pinned_array((nbytes,), np.uint8))
        stream.synchronize()
        return fetch.finish()["s0"] if fetch is not None else None

    got, want = run(512), gfl_records(dense, filters)["s0"]
    for extra in ({}, {"keep_classes": (1, 4, 6)}, {"pre_nms_top_k": 9, "max_detections": 4}, {"nms_iou": 0.0}):
        f_nms = dataclasses.replace(
            filters[0], **{"nms_iou": 0.45, "pre_nms_top_k": 1000, "max_detections": 100, **extra}
        )
        nms_levels = [(f_nms, *levels[0][1:]), *levels[1:]]
        fin = run_nms(nms_levels, f_nms)
        ref = gfl_nms_reference(got, f_nms)  # type: ignore[arg-type]
        ok_f, ok_r = fin.frame < 2, ref.frame < 2
        assert 0 < ok_f.sum() < ok_g_count(got), extra
        for a in ("frame", "cell", "cls", "score", "box"):
            np.testing.assert_array_equal(getattr(fin, a)[ok_f], getattr(ref, a)[ok_r], err_msg=str(extra))
    assert got.nonfinite.tolist() == want.nonfinite.tolist() == [False, False, True]  # type: ignore[attr-defined]
    ok_g, ok_w = got.frame < 2, want.frame < 2  # type: ignore[attr-defined]
    assert ok_g.sum() > 20
    for a in ("frame", "cell", "cls", "score"):
        np.testing.assert_array_equal(getattr(got, a)[ok_g], getattr(want, a)[ok_w])
    np.testing.assert_allclose(got.box[ok_g], want.box[ok_w], atol=1e-3, rtol=1e-5)  # type: ignore[attr-defined]
    tie = (got.frame == 0) & (got.cell == 4)  # type: ignore[attr-defined]
    assert got.cls[tie].tolist() == (list(range(7)) if multi_label else [0])  # type: ignore[attr-defined]
    assert run(4) is None


def _run_model(model: object, frames: list[np.ndarray]) -> list[object]:
    buf = model.buffers.get_nowait()  # type: ignore[attr-defined]
    ts = [model.preprocess(f, buf, i) for i, f in enumerate(frames)]  # type: ignore[attr-defined]
    model.preprocess.finish(buf, len(frames))  # type: ignore[attr-defined]
    out = model.backend.infer(buf, len(frames))  # type: ignore[attr-defined]
    model.buffers.put_nowait(buf)  # type: ignore[attr-defined]
    return model.decoder.decode(out, ts)  # type: ignore[attr-defined,no-any-return]


def _detections(
    device: str, source: str, frames: int, batch: int, frame_upload: bool = False
) -> tuple[dict[int, list[str]], object]:
    seen: dict[int, list[str]] = {}
    with Pipeline(
        "models/nanodet-m", [source], device=device, max_batch=batch, max_frames=frames, frame_upload=frame_upload
    ) as p:
        for r in p.results():
            seen[r.sequence] = sorted(d.label for d in r.detections)
    return seen, p.stats()


def _agree(a: dict[int, list[str]], b: dict[int, list[str]]) -> float:
    same = sum(1 for k in a if abs(len(a[k]) - len(b.get(k, []))) <= 1)
    return same / max(1, len(a))


def test_pipeline_cpu_decode_kernel_reads_frames_in_place(
    ort_cuda: str, clip: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default the preprocessing kernel reads each CPU-decoded frame from its mapped pinned slot:
    no copy at all, and the same detections as the CPU pipeline."""
    monkeypatch.chdir(repo)
    gpu, stats = _detections(ort_cuda, str(clip), 40, 4)
    counts = stats.copies["counts"]  # type: ignore[attr-defined]
    assert stats.results == 40  # type: ignore[attr-defined]
    assert counts == {"host_to_host": 0, "host_to_device": 0, "device_to_host": 0, "device_to_device": 0}
    assert stats.copies_per_frame == 0  # type: ignore[attr-defined]
    cpu, _ = _detections("cpu", str(clip), 40, 4)
    assert _agree(gpu, cpu) >= 0.9


def test_pipeline_cpu_decode_frame_upload_one_copy_per_frame(
    ort_cuda: str, clip: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    uploaded, stats = _detections(ort_cuda, str(clip), 40, 4, frame_upload=True)
    counts = stats.copies["counts"]  # type: ignore[attr-defined]
    assert stats.results == 40  # type: ignore[attr-defined]
    assert counts["host_to_device"] == 40
    assert counts["device_to_host"] == 0 and counts["host_to_host"] == 0
    assert stats.copies_per_frame == pytest.approx(1.0)  # type: ignore[attr-defined]
    in_place, _ = _detections(ort_cuda, str(clip), 40, 4)
    assert uploaded == in_place  # the same pixels reach the kernel either way


def test_pipeline_nvdec_no_pcie_copies(
    ort_cuda: str, nvdec: str, clip: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    gpu, stats = _detections(ort_cuda, f"nvdec:{clip}", 40, 4)
    counts = stats.copies["counts"]  # type: ignore[attr-defined]
    assert stats.results == 40  # type: ignore[attr-defined]
    assert counts["host_to_device"] == 0 and counts["device_to_host"] == 0
    assert counts["device_to_device"] == 40  # out of the decoder's reuse ring into the pool slot
    cpu, _ = _detections("cpu", str(clip), 40, 4)
    assert _agree(gpu, cpu) >= 0.9


def test_two_lanes_run_at_once_and_match_one(ort_cuda: str, nanodet: Path) -> None:
    """Two inference workers: each thread takes its own lane (ORT session + CUDA stream); runs on both
    lanes at once (GPU candidate filter included) give what a single lane gives for the same input."""
    import threading

    pkg = load_package(nanodet)
    one = load_model(pkg, OnnxRuntimeConfig(), device=ort_cuda, max_batch=4, warmup=False, buffers=2)
    two = load_model(pkg, OnnxRuntimeConfig(), device=ort_cuda, max_batch=4, warmup=False, buffers=2, workers=2)
    lanes = two.backend.lanes  # type: ignore[attr-defined]
    assert len(one.backend.lanes) == 1 and len(lanes) == 2  # type: ignore[attr-defined]
    assert two.backend.concurrent_infer and lanes[0].stream.handle != lanes[1].stream.handle
    rng = np.random.default_rng(3)
    ones = [one.buffers.get_nowait() for _ in range(2)]
    twos = [two.buffers.get_nowait() for _ in range(2)]
    for a, b in zip(ones, twos, strict=True):
        host = rng.standard_normal(a.array.shape).astype(a.array.dtype)
        a.array.copy_from_host(host)
        b.array.copy_from_host(host)
    expected = [{k: np.asarray(v) for k, v in one.backend.infer(buf, 4).items()} for buf in ones]
    got: list[list[dict[str, np.ndarray]]] = [[], []]
    used: list[int] = [-1, -1]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(25):
                got[i].append({k: np.asarray(v) for k, v in two.backend.infer(twos[i], 4).items()})
            used[i] = two.backend.lane().index  # type: ignore[attr-defined]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(used) == [0, 1]
    for i in range(2):
        assert len(got[i]) == 25
        for outputs in got[i]:
            for name, want in expected[i].items():
                np.testing.assert_allclose(outputs[name], want, atol=1e-4, rtol=1e-3)
    one.close()
    two.close()


def test_pipeline_two_inference_workers_on_the_gpu(
    ort_cuda: str, clip: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """infer_workers=2 on cuda: two lanes, every frame exactly once and in order per stream, and the same
    detections as one worker."""
    monkeypatch.chdir(repo)
    seen: dict[int, dict[str, list[tuple[int, list[str]]]]] = {}
    for workers in (1, 2):
        per: dict[str, list[tuple[int, list[str]]]] = {}
        sources = [f"a={clip}", f"b={clip}"]
        with Pipeline(
            "models/nanodet-m", sources, device=ort_cuda, max_batch=4, max_frames=40, infer_workers=workers
        ) as p:
            assert p.infer_workers == workers
            assert len(p.model.backend.lanes) == workers  # type: ignore[attr-defined]
            for r in p.results():
                per.setdefault(r.stream_id, []).append((r.sequence, sorted(d.label for d in r.detections)))
        seen[workers] = per
    assert [s for s, _ in seen[2]["a"]] == list(range(40)) and [s for s, _ in seen[2]["b"]] == list(range(40))
    assert seen[2] == seen[1]


def _top_k_on_device(logits: np.ndarray, k: int) -> object:
    """The top-k kernel alone, on ``logits`` uploaded as they are (float32 or float16)."""
    from edgefleet.sdk._backends._ort_cuda import _TopKPlan
    from edgefleet.sdk._cuda._array import DeviceArray
    from edgefleet.sdk._cuda._bindings import Stream
    from edgefleet.sdk._cuda._memory import pinned_array

    arr = DeviceArray.empty(logits.shape, logits.dtype, 0)
    arr.copy_from_host(np.ascontiguousarray(logits))
    n = logits.shape[0]
    out = DeviceArray.empty((n, 2 * k + 2), np.float32, 0)
    plan = _TopKPlan(CandidateFilter("x", 0.0, "top_k", k=k), arr, int(np.prod(logits.shape[1:])), out, 0)
    stream = Stream(0)
    plan.queue(n, stream, pinned_array((n * (2 * k + 2) * 4,), np.uint8))
    stream.synchronize()
    return plan.finish()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(("columns", "k"), [(1000, 5), (7, 7), (300, 1), (12_000, 64), (1001, 20)])
def test_top_k_kernel_matches_numpy(gpu: str, dtype: type, columns: int, k: int) -> None:
    """Largest first, ties to the lower column, the row's log-sum-exp and minimum; a row with a NaN or an
    infinity has a NaN log-sum-exp (the dense view turns it to NaN for the health checks)."""
    rng = np.random.default_rng(columns + k)
    logits = rng.normal(0, 4, (9, columns)).astype(dtype)
    logits[1] = np.round(logits[1])  # many ties
    logits[2, columns // 2] = np.nan
    logits[3, 0] = np.inf
    logits[4, :] = -np.inf
    logits[4, columns - 1] = 1.0
    top = _top_k_on_device(logits, k)
    flat = logits.astype(np.float32)
    want_idx = np.argsort(-flat, axis=1, kind="stable")[:, :k]
    good = [0, 1, 5, 6, 7, 8]
    np.testing.assert_array_equal(top.index[good], want_idx[good])  # type: ignore[attr-defined]
    np.testing.assert_array_equal(top.values[good], np.take_along_axis(flat, want_idx, axis=1)[good])  # type: ignore[attr-defined]
    m = flat[good].max(axis=1)
    lse = m + np.log(np.exp(flat[good] - m[:, None]).sum(axis=1))
    np.testing.assert_allclose(top.lse[good], lse, rtol=1e-5, atol=1e-5)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(top.low[good], flat[good].min(axis=1))  # type: ignore[attr-defined]
    assert np.isnan(top.lse[[2, 3]]).all()  # type: ignore[attr-defined]
    assert top.index[4, 0] == columns - 1 and len(set(top.index[4].tolist())) == k  # type: ignore[attr-defined]
    dense = np.asarray(top)
    assert dense.shape == logits.shape and np.isnan(dense[[2, 3]]).all() and np.isfinite(dense[good]).all()


def test_classifier_top_k_on_the_gpu_gives_cpu_classifications(ort_cuda: str, tmp_path: Path) -> None:
    """A 1000-class classifier: only each row's top k comes back from the GPU (TopK) and the decoded
    classes and scores equal the CPU backend's full-logit decode."""
    from edgefleet.sdk._sparse import TopK
    from tests.support.onnx_models import classifier_package

    logits = tuple(float(v) for v in np.random.default_rng(1).normal(0, 3, 1000))
    pkg = load_package(classifier_package(tmp_path / "c", logits=logits))
    gpu = load_model(pkg, OnnxRuntimeConfig(), device=ort_cuda, max_batch=4, warmup=False)
    cpu = load_model(pkg, OnnxRuntimeConfig(), device="cpu", max_batch=4, warmup=False)
    frames = [np.full((48, 64, 3), 90, np.uint8), np.full((64, 64, 3), 30, np.uint8)]
    got, want = _run_model(gpu, frames), _run_model(cpu, frames)
    for g, w in zip(got, want, strict=True):
        assert [c.class_id for c in g.classifications] == [c.class_id for c in w.classifications]
        np.testing.assert_allclose(
            [c.score for c in g.classifications], [c.score for c in w.classifications], rtol=1e-4
        )
    buf = gpu.buffers.get_nowait()
    out = gpu.backend.infer(buf, 2)["logits"]
    assert isinstance(out, TopK) and out.values.shape == (2, 3)
    gpu.buffers.put_nowait(buf)
    gpu.close()
    cpu.close()


def test_keep_raw_on_the_gpu_gives_the_exact_outputs(ort_cuda: str, tmp_path: Path) -> None:
    """keep_raw turns the GPU filters off: a classifier's raw logits come back whole and exact (with the
    top-k filter they would be a dense view of the top k only), and its classifications are unchanged."""
    from tests.support.onnx_models import classifier_package

    logits = np.random.default_rng(4).normal(0, 3, 1000).astype(np.float32)
    pkg = classifier_package(tmp_path / "c", logits=tuple(float(v) for v in logits))
    src = ["synthetic:?width=64&height=48&live=0"]
    with Pipeline(pkg, src, device=ort_cuda, max_frames=3, keep_raw=True) as p:
        raw = [r for r in p.results()]
    with Pipeline(pkg, src, device=ort_cuda, max_frames=3) as p:
        filtered = [r for r in p.results()]
    assert len(raw) == len(filtered) == 3
    for a, b in zip(raw, filtered, strict=True):
        assert a.raw is not None and b.raw is None
        np.testing.assert_allclose(a.raw["logits"], logits, atol=1e-5)
        assert [c.class_id for c in a.classifications] == [c.class_id for c in b.classifications]
