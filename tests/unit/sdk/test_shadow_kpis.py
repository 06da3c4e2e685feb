"""Shadow agreement arithmetic (``_shadow_kpis``) and the shadow gate's and configs' checks."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgefleet.sdk import ConfigError, Detection, Frame, Result, load_package
from edgefleet.sdk._metrics import CopyCounter
from edgefleet.sdk._model import load_model
from edgefleet.sdk._shadow import ShadowConfig, ShadowGate, ShadowRun, shadow_config
from edgefleet.sdk._shadow_kpis import AgreementCounter, match, output_labels
from edgefleet.sdk._swap import shadow_gate


def d(label: str, x: float, score: float = 0.9, w: float = 10.0) -> Detection:
    return Detection((x, 0.0, x + w, w), score, 0, label)


def test_match_is_class_aware_greedy_and_uses_each_serving_box_once() -> None:
    serving = [d("person", 0), d("car", 100)]
    assert match(serving, [d("person", 1), d("car", 101)]) == 2
    assert match(serving, [d("car", 1), d("person", 101)]) == 0  # right boxes, wrong names
    assert match(serving, [d("person", 0, 0.9), d("person", 0, 0.8)]) == 1  # a duplicate is a false positive
    assert match(serving, [d("person", 6)]) == 0  # IoU 4/16 = 0.25 < 0.5
    assert match([], [d("person", 0)]) == 0


def test_agreement_formulas_on_hand_made_frames() -> None:
    c = AgreementCounter({"person", "car", "dog"}, {"person", "car"})
    c.add([d("person", 0, 0.8), d("car", 100, 0.6), d("dog", 200)], [d("person", 0, 0.7)])
    c.add([d("person", 0, 0.8)], [d("person", 0, 0.5), d("car", 300, 0.5)])
    a = c.result()
    assert a.shared_labels == ("car", "person") and a.excluded == 1  # the dog: a label only one side has
    assert (a.frames, a.serving_detections, a.candidate_detections, a.matched) == (2, 3, 3, 2)
    assert a.precision == pytest.approx(2 / 3) and a.recall == pytest.approx(2 / 3)
    assert a.f1 == pytest.approx(2 * 2 / 6)
    assert a.class_counts == {"car": (1, 1), "person": (2, 2)} and a.class_count_ratio == {"car": 1.0, "person": 1.0}
    assert a.class_mix_shift == pytest.approx(0.0)
    assert a.detection_rate_change == pytest.approx(0.0)
    assert a.mean_confidence_shift == pytest.approx((0.7 + 0.5 + 0.5) / 3 - (0.8 + 0.6 + 0.8) / 3)
    assert a.serving_per_frame == pytest.approx(1.5)


def test_agreement_edges_nothing_seen_and_a_blind_candidate() -> None:
    both_empty = AgreementCounter({"a"}, {"a"})
    both_empty.add([], [])
    a = both_empty.result()
    assert (a.f1, a.class_mix_shift, a.detection_rate_change) == (1.0, 0.0, 0.0)
    blind = AgreementCounter({"a"}, {"a"})
    blind.add([d("a", 0), d("a", 50)], [])
    b = blind.result()
    assert (b.f1, b.recall, b.class_mix_shift, b.detection_rate_change) == (0.0, 0.0, 1.0, -1.0)
    mixed = AgreementCounter({"a", "b"}, {"a", "b"})
    mixed.add([d("a", 0), d("a", 50)], [d("b", 0), d("b", 50)])
    assert mixed.result().class_mix_shift == pytest.approx(1.0)


def test_output_labels_prefers_the_decoders_class_subset() -> None:
    assert output_labels(["a", "b", "c"], {"classes": ["b"]}) == {"b"}
    assert output_labels(["a", "b"], {}) == {"a", "b"}


def test_gate_names_each_failing_kpi_with_value_and_limit() -> None:
    c = AgreementCounter({"a", "b"}, {"a", "b"})
    for _ in range(3):
        c.add([d("a", 0), d("a", 50)], [d("b", 0)])
    gate = ShadowGate(min_frames=5, min_f1=0.5, max_class_mix_shift=0.3, max_detection_rate_change=0.25)
    failures = gate.failures(c.result())
    assert failures == [
        "shadow_frames 3 < 5 (too few frames compared in 60 s)",
        "shadow_f1 0.000 < min_shadow_f1 0.5",
        "shadow_class_mix_shift 1.000 > max_class_mix_shift 0.3",
        "shadow_detection_rate_change -0.500 exceeds ±0.25",
    ]
    assert ShadowGate(min_frames=1).failures(c.result()) == []  # limits left unset are not checked


def test_bad_shadow_settings_are_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"shadow: sample_rate: .*less than or equal to 1"):
        shadow_config({"sample_rate": 2})
    with pytest.raises(ConfigError, match=r"shadow: min_f1: .*"):
        shadow_gate({"min_f1": "high"})
    with pytest.raises(ConfigError, match=r"shadow: bogus: .*"):
        shadow_gate({"bogus": 1})
    with pytest.raises(TypeError):
        shadow_gate(0.5)  # type: ignore[arg-type]


def _toy_run(toy_models: dict[str, Path], **cfg: Any) -> tuple[ShadowRun, CopyCounter]:
    model = load_model(load_package(toy_models["yolo_v2"]), max_batch=1, warmup=False)
    copies = CopyCounter()
    return ShadowRun(model, frozenset({"person"}), ShadowConfig(**cfg), copies, close_model=True), copies


def _frame(seq: int, stream: str = "cam") -> Frame:
    return Frame(stream, seq, 0.0, 0.0, np.zeros((48, 64, 3), np.uint8))


def test_sampling_per_stream_the_bounded_queue_and_the_busy_budget(toy_models: dict[str, Path]) -> None:
    run, copies = _toy_run(toy_models, sample_rate=0.25, queue=2)  # not started: nothing drains the queue
    for seq in range(100):
        run.offer(_frame(seq))
        run.offer(_frame(seq, "other"))
    assert run.sampled == 50  # a quarter of each stream's frames, the first one included
    assert run.dropped == 48 and len(run._queue) == 2  # the oldest dropped, never a wait
    assert copies.snapshot()["counts"]["host_to_host"] == 50  # each sampled frame: one counted copy
    run._free_at = time.monotonic() + 60  # the busy budget is spent
    for seq in range(100, 108):
        run.offer(_frame(seq))
    assert run.skipped_budget == 2 and run.sampled == 50
    run.stop()
    assert run._pending == {} and run.agreement().frames == 0


def test_a_started_run_compares_the_pairs_whichever_half_comes_first(toy_models: dict[str, Path]) -> None:
    run, _ = _toy_run(toy_models, sample_rate=1.0, max_busy=1.0, queue=8)
    early = Result("cam", 0, 0.0, "m", "1", 64, 48, 0.0)
    run.offer(_frame(0))
    run.observe([early])  # the serving half before the candidate ran
    run.start()
    run.offer(_frame(1))
    a = run.wait_frames(1, 10.0)
    run.observe([Result("cam", 1, 0.0, "m", "1", 64, 48, 0.0)])  # the serving half after it
    a = run.wait_frames(2, 10.0)
    a = run.stop()
    assert a.frames == 2 and a.sampled == 2 and a.latency_p50_ms > 0
