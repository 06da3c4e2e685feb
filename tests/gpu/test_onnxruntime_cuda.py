"""ONNX Runtime on the GPU: IOBinding on device buffers, CUDA graphs, GPU candidate filtering, and the
pipeline's copy accounting (one upload per CPU-decoded frame, none with NVDEC)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgefleet.sdk import OnnxRuntimeConfig, Pipeline, load_package
from edgefleet.sdk._model import load_model

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
    rng = np.random.default_rng(0)
    gbuf = gpu.buffers.get_nowait()
    assert gbuf.device.startswith("cuda")
    cbuf = cpu.buffers.get_nowait()
    host = rng.standard_normal(cbuf.array.shape).astype(np.float32)
    cbuf.array[...] = host
    gbuf.array.copy_from_host(host)
    for n in (4, 1, 3):
        g = gpu.backend.infer(gbuf, n)
        assert gbuf.handle.bound_rows == 4  # pad_batch: one input shape whatever the batch size
        c = cpu.backend.infer(cbuf, n)
        assert set(g) == set(c)
        for name in c:
            assert g[name].shape == c[name].shape
            np.testing.assert_allclose(g[name], c[name], atol=2e-3, rtol=1e-2)
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
    assert gpu.backend.filter_candidates(out.name, out.shape[1] - 4, 0.25, capacity=4)  # type: ignore[attr-defined]
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


def test_symbolic_output_dims_are_learned_then_bound_and_filtered(ort_cuda: str, tmp_path: Path) -> None:
    """An exporter's symbolic anchor dimension: ORT allocates the output on the first run, then it is
    preallocated and bound, and the GPU candidate filter engages; detections equal the CPU's every time."""
    from tests.support.onnx_models import yolo_package

    pkg = load_package(yolo_package(tmp_path / "y", symbolic_anchors=True))
    gpu = load_model(pkg, OnnxRuntimeConfig(), device=ort_cuda, max_batch=2, warmup=False, buffers=1)
    out = gpu.backend.outputs[0]  # type: ignore[attr-defined]
    assert out.shape[2] <= 0  # unknown to ORT before a run
    assert gpu.backend.filter_candidates(out.name, len(pkg.labels), 0.25, capacity=4)  # type: ignore[attr-defined]
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


def _run_model(model: object, frames: list[np.ndarray]) -> list[object]:
    buf = model.buffers.get_nowait()  # type: ignore[attr-defined]
    ts = [model.preprocess(f, buf, i) for i, f in enumerate(frames)]  # type: ignore[attr-defined]
    model.preprocess.finish(buf, len(frames))  # type: ignore[attr-defined]
    out = model.backend.infer(buf, len(frames))  # type: ignore[attr-defined]
    model.buffers.put_nowait(buf)  # type: ignore[attr-defined]
    return model.decoder.decode(out, ts)  # type: ignore[attr-defined,no-any-return]


def _detections(device: str, source: str, frames: int, batch: int) -> tuple[dict[int, list[str]], object]:
    seen: dict[int, list[str]] = {}
    with Pipeline("models/nanodet-m", [source], device=device, max_batch=batch, max_frames=frames) as p:
        for r in p.results():
            seen[r.sequence] = sorted(d.label for d in r.detections)
    return seen, p.stats()


def _agree(a: dict[int, list[str]], b: dict[int, list[str]]) -> float:
    same = sum(1 for k in a if abs(len(a[k]) - len(b.get(k, []))) <= 1)
    return same / max(1, len(a))


def test_pipeline_cpu_decode_one_upload_per_frame(
    ort_cuda: str, clip: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    gpu, stats = _detections(ort_cuda, str(clip), 40, 4)
    counts = stats.copies["counts"]  # type: ignore[attr-defined]
    assert stats.results == 40  # type: ignore[attr-defined]
    assert counts["host_to_device"] == 40
    assert counts["device_to_host"] == 0 and counts["host_to_host"] == 0
    assert stats.copies_per_frame == pytest.approx(1.0)  # type: ignore[attr-defined]
    cpu, _ = _detections("cpu", str(clip), 40, 4)
    assert _agree(gpu, cpu) >= 0.9


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
