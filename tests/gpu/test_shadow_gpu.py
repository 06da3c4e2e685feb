"""Shadow mode on the GPU (issue 22): NanoDet-m 1.0.0 serving on ONNX Runtime CUDA, 2.0.0 in shadow on
the same device: the same agreement as on the CPU, and the rotated-label 2.0.1 refused at the shadow gate."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgefleet.sdk import Pipeline, Result
from tests.support.shadow_models import build_v2, shuffled

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def candidates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("shadow-gpu")
    v2 = build_v2(root / "v2")
    return {"v2": v2, "shuffled": shuffled(v2, root / "shuffled")}


def test_shadow_agreement_on_cuda(ort_cuda: str, nanodet: Path, clip: Path, candidates: dict[str, Path]) -> None:
    with Pipeline(nanodet, [f"cam0={clip}"], device=ort_cuda, max_frames=200) as p:
        run = p.shadow(candidates["v2"], {"sample_rate": 0.5, "max_busy": 1.0, "queue": 8})
        results = list(p.results(timeout=120))
        run.wait_frames(30, 30.0)
        a = run.stop()
    assert [r.sequence for r in results] == list(range(200)) and {r.model_version for r in results} == {"1.0.0"}
    assert a.frames >= 30 and a.f1 >= 0.75 and a.class_mix_shift <= 0.1, a.to_dict()


def test_rotated_labels_refused_at_the_shadow_gate_on_cuda(
    ort_cuda: str, nanodet: Path, clip: Path, candidates: dict[str, Path]
) -> None:
    gate = {"min_f1": 0.7, "min_frames": 20, "max_s": 60.0, "shadow": {"sample_rate": 0.5, "max_busy": 1.0}}
    seen: list[Result] = []
    with Pipeline(nanodet, [f"cam0={clip}?loop=1&realtime=1"], device=ort_cuda, on_result=seen.append) as p:
        time.sleep(2.0)  # serving, paced at the clip's 10 fps
        report = p.swap_model(candidates["shuffled"], health_window_s=0.0, shadow=gate)
        p.stop()
    assert seen and {r.model_version for r in seen} == {"1.0.0"}
    assert not report.ok and report.stage == "shadow" and "shadow_f1" in (report.error or ""), report.error
