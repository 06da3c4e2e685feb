"""Hot swap under load: no dropped frame, one version per result, refusals keep the old version serving,
and a model that fails after cut-over is rolled back with its batch re-run on the previous version."""

from __future__ import annotations

import itertools
import shutil
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml

from edgefleet.sdk import Pipeline, Result, SwapReport, load_package

# Paced at 30 fps each; live=false makes them wait instead of dropping when a loaded CI machine falls
# behind, so the invariants below test the swap, not the machine's speed (drops are tested elsewhere).
STREAMS = [f"cam{i}=synthetic:?width=320&height=240&fps=30&frames=120&live=false" for i in range(4)]


def _collect(p: Pipeline) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = defaultdict(list)
    for r in p.results():
        out[r.stream_id].append(r)
    return out


def _check_invariants(per_stream: dict[str, list[Result]], frames: int) -> None:
    assert sorted(per_stream) == ["cam0", "cam1", "cam2", "cam3"]
    for results in per_stream.values():
        assert [r.sequence for r in results] == list(range(frames))  # gap-free, in order, exactly once


def _swap_later(
    p: Pipeline, pkg: Path | str, delay: float, reports: list[SwapReport], **kw: object
) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        reports.append(p.swap_model(pkg, **kw))  # type: ignore[arg-type]

    t = threading.Thread(target=run)
    t.start()
    return t


def test_swap_under_load_changes_version_once_per_stream(toy_models: dict[str, Path]) -> None:
    reports: list[SwapReport] = []
    with Pipeline(toy_models["yolo"], STREAMS, max_batch=4) as p:
        t = _swap_later(p, toy_models["yolo_v2"], 1.5, reports, health_window_s=0.5)
        per_stream = _collect(p)
        t.join()
        stats = p.stats()
    (report,) = reports
    assert report.ok, report.error
    assert (report.old_ref, report.new_ref) == ("toy-yolo:1.0.0", "toy-yolo:2.0.0")
    assert report.warmup_frames > 0  # warmed up on real recent frames
    _check_invariants(per_stream, 120)
    assert stats.dropped == 0 and stats.frames_in == stats.results == 480
    for results in per_stream.values():
        versions = [r.model_version for r in results]
        assert versions[0] == "1.0.0" and versions[-1] == "2.0.0"
        assert sum(a != b for a, b in itertools.pairwise(versions)) == 1
        # the new version's class list and input size came with it
        assert {d.label for r in results if r.model_version == "2.0.0" for d in r.detections} <= set("abcde")


def _assert_refused_and_old_serving(p: Pipeline, per_stream: dict[str, list[Result]], report: SwapReport) -> None:
    assert not report.ok and report.error
    assert p.model.ref == "toy-yolo:1.0.0"
    versions = Counter(r.model_version for rs in per_stream.values() for r in rs)
    assert versions == Counter({"1.0.0": 480})


def test_nan_model_refused_at_the_gate(toy_models: dict[str, Path]) -> None:
    reports: list[SwapReport] = []
    with Pipeline(toy_models["yolo"], STREAMS, max_batch=4) as p:
        t = _swap_later(p, toy_models["yolo_nan"], 1.0, reports)
        per_stream = _collect(p)
        t.join()
        _assert_refused_and_old_serving(p, per_stream, reports[0])
    assert reports[0].stage == "gate" and "not finite" in (reports[0].error or "")
    _check_invariants(per_stream, 120)


def test_shape_mismatch_refused_at_load(toy_models: dict[str, Path], tmp_path: Path) -> None:
    from tests.support.onnx_models import write_package

    bad = tmp_path / "bad"
    shutil.copytree(toy_models["yolo_v2"], bad)
    data = yaml.safe_load((bad / "manifest.yaml").read_text())
    data["outputs"][0]["shape"] = [-1, 12, 16]
    write_package(
        bad,
        name=data["name"],
        version="2.0.1",
        task="detection",
        input_spec=data["input"],
        outputs=data["outputs"],
        decoder=data["decoder"],
        labels=list("abcde"),
    )
    reports: list[SwapReport] = []
    with Pipeline(toy_models["yolo"], STREAMS, max_batch=4) as p:
        t = _swap_later(p, bad, 1.0, reports)
        per_stream = _collect(p)
        t.join()
        _assert_refused_and_old_serving(p, per_stream, reports[0])
    assert reports[0].stage == "load" and "[-1, 12, 16]" in (reports[0].error or "")


def test_model_failing_warm_up_is_refused(toy_models: dict[str, Path], tmp_path: Path) -> None:
    from edgefleet.sdk import DecodeContext, Decoder, register_decoder

    class Broken(Decoder):
        def __init__(self, ctx: DecodeContext) -> None:
            pass

        def decode(self, outputs, transforms):  # type: ignore[no-untyped-def]
            raise RuntimeError("decoder cannot read these outputs")

    register_decoder("test-broken", Broken, replace=True)
    bad = tmp_path / "broken"
    shutil.copytree(toy_models["yolo_v2"], bad)
    data = yaml.safe_load((bad / "manifest.yaml").read_text())
    data["decoder"] = {"type": "test-broken"}
    (bad / "manifest.yaml").write_text(yaml.safe_dump(data))
    reports: list[SwapReport] = []
    with Pipeline(toy_models["yolo"], STREAMS, max_batch=4) as p:
        t = _swap_later(p, bad, 1.0, reports)
        per_stream = _collect(p)
        t.join()
        _assert_refused_and_old_serving(p, per_stream, reports[0])
    assert "warm-up failed" in (reports[0].error or "")


def _signed(src: Path, dest: Path, key: Path) -> Path:
    from edgefleet.sdk import load_private_key, read_manifest, sign_manifest

    shutil.copytree(src, dest)
    manifest = sign_manifest(read_manifest(dest / "manifest.yaml"), load_private_key(key))
    text = yaml.safe_dump(manifest.model_dump(mode="json", exclude_none=True), sort_keys=False)
    (dest / "manifest.yaml").write_text(text)
    return dest


def _bad_package(kind: str, good: Path, nan: Path, tmp: Path) -> tuple[Path, dict[str, object], str]:
    """A package ``swap_model`` must refuse, the keyword arguments of the call, and what the error says."""
    from edgefleet.sdk import generate_signing_key, key_id, load_public_key

    generate_signing_key(tmp / "a.pem", tmp / "a.pub.pem")
    generate_signing_key(tmp / "b.pem", tmp / "b.pub.pem")
    trusted = {key_id(k): k for k in [load_public_key(tmp / "a.pub.pem")]}
    bad = tmp / kind
    if kind == "hash_mismatch":  # same size, one byte flipped
        shutil.copytree(good, bad)
        data = bytearray((bad / "model.onnx").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (bad / "model.onnx").write_bytes(bytes(data))
        return bad, {}, "sha256"
    if kind == "truncated_file":
        shutil.copytree(good, bad)
        (bad / "model.onnx").write_bytes((bad / "model.onnx").read_bytes()[:-10])
        return bad, {}, "truncated"
    if kind == "truncated_archive":
        import tarfile

        whole = tmp / "whole.tar"
        with tarfile.open(whole, "w") as tar:
            tar.add(good, arcname="pkg")
        cut = tmp / "cut.tar"
        cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
        return cut, {}, "cut.tar"
    if kind == "untrusted_signature":  # signed, by a key the caller does not trust
        return _signed(good, bad, tmp / "b.pem"), {"trusted_keys": trusted}, "not trusted"
    if kind == "tampered_signature":  # signed by a trusted key, then the manifest changed
        signed = _signed(good, bad, tmp / "a.pem")
        text = (signed / "manifest.yaml").read_text().replace("score_threshold: 0.25", "score_threshold: 0.3")
        (signed / "manifest.yaml").write_text(text)
        return signed, {"trusted_keys": trusted}, "signature"
    if kind == "unsigned":
        return good, {"trusted_keys": trusted, "require_signature": True}, "not signed"
    if kind == "wrong_shapes":
        from tests.support.onnx_models import write_package

        shutil.copytree(good, bad)
        data = yaml.safe_load((bad / "manifest.yaml").read_text())
        data["outputs"][0]["shape"] = [-1, 12, 16]
        write_package(bad, name=data["name"], version="2.0.1", task="detection", input_spec=data["input"],
                      outputs=data["outputs"], decoder=data["decoder"], labels=list("abcde"))  # fmt: skip
        return bad, {}, "[-1, 12, 16]"
    if kind == "nan_at_gate":
        return nan, {}, "not finite"
    assert kind == "missing"
    return tmp / "nowhere", {}, "no such model package"


@pytest.mark.parametrize(
    "kind",
    ["hash_mismatch", "truncated_file", "truncated_archive", "untrusted_signature", "tampered_signature",
     "unsigned", "wrong_shapes", "nan_at_gate", "missing"],
)  # fmt: skip
def test_swap_model_returns_a_refused_report_for_every_bad_package(
    toy_models: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    """A refused package is a report, never an exception (an app that did not expect IntegrityError died
    of it); the old version keeps serving every frame."""
    bad, kwargs, why = _bad_package(kind, toy_models["yolo_v2"], toy_models["yolo_nan"], tmp_path)
    events: list[str] = []
    with Pipeline(toy_models["yolo"], ["synthetic:?fps=60&frames=60&live=0"]) as p:
        report = p.swap_model(bad, progress=lambda e: events.append(e.stage), **kwargs)  # type: ignore[arg-type]
        assert isinstance(report, SwapReport)
        assert not report.ok and why in (report.error or ""), report
        assert report.old_ref == "toy-yolo:1.0.0" and p.model.ref == "toy-yolo:1.0.0"
        assert events[-1] == "failed" and report.events[-1].stage == "failed"
        results = list(p.results())
    assert len(results) == 60 and {r.model_version for r in results} == {"1.0.0"}


def test_swap_model_raises_only_for_misuse(toy_models: dict[str, Path]) -> None:
    from edgefleet.sdk import ConfigError, PipelineError

    p = Pipeline(toy_models["yolo"], ["synthetic:?fps=60&frames=10&live=0"])
    with pytest.raises(PipelineError, match="not running|created"):
        p.swap_model(toy_models["yolo_v2"])  # not started
    with p:
        with pytest.raises(TypeError, match="package"):
            p.swap_model(42)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="health_window_s"):
            p.swap_model(toy_models["yolo_v2"], health_window_s=float("nan"))
        list(p.results())
    with pytest.raises(PipelineError):
        p.swap_model(toy_models["yolo_v2"])  # closed


def test_failure_after_cutover_rolls_back_and_reruns_the_batch(toy_models: dict[str, Path], tmp_path: Path) -> None:
    from tests.support.onnx_models import yolo_package

    # passes the gate on normal frames; outputs NaN once the scene turns white (frame 45 on)
    flaky = yolo_package(tmp_path / "flaky", version="4.0.0", nan_above=0.75)
    streams = [f"cam{i}=synthetic:?width=320&height=240&fps=30&frames=120&white_after=45&live=false" for i in range(4)]
    reports: list[SwapReport] = []
    events: list[str] = []
    with Pipeline(toy_models["yolo"], streams, max_batch=4) as p:
        t = _swap_later(p, flaky, 0.6, reports, health_window_s=30.0, progress=lambda e: events.append(e.stage))
        started = time.monotonic()
        per_stream = _collect(p)
        t.join()
        history = [e.stage for e in p.swap_history]
        assert p.model.ref == "toy-yolo:1.0.0"
    assert reports[0].ok  # it passed the gate...
    assert "rollback" in history  # ...then the health check rolled it back
    assert time.monotonic() - started < 60
    _check_invariants(per_stream, 120)
    for results in per_stream.values():
        versions = [r.model_version for r in results]
        assert versions[-1] == "1.0.0" and "4.0.0" in versions
        assert all(r.model_version == "1.0.0" for r in results if r.sequence >= 45)  # no NaN result escaped


def test_manual_rollback_within_the_health_window(toy_models: dict[str, Path]) -> None:
    with Pipeline(toy_models["yolo"], ["synthetic:?fps=60&frames=150&width=160&height=120&live=0"]) as p:
        report = p.swap_model(toy_models["yolo_v2"], health_window_s=30.0)
        assert report.ok and p.model.ref == "toy-yolo:2.0.0"
        back = p.rollback("operator asked")
        assert back.ok and p.model.ref == "toy-yolo:1.0.0"
        assert not p.rollback().ok  # nothing left to roll back to
        results = list(p.results())
    assert len(results) == 150


def test_repeated_swaps_release_old_versions(toy_models: dict[str, Path]) -> None:
    pkgs = [load_package(toy_models["yolo_v2"]), load_package(toy_models["yolo"])]
    with Pipeline(toy_models["yolo"], ["synthetic:?fps=100&width=160&height=120"]) as p:
        first = p.model
        for i in range(6):
            assert p.swap_model(pkgs[i % 2], health_window_s=0, warmup_frames=1).ok
        assert first.backend._session is None  # type: ignore[attr-defined]  # closed, not leaked
        p.stop()
        list(p.results())


@pytest.mark.parametrize("workers", [1, 2])
def test_decoder_failing_after_cutover_rolls_back_and_reruns_the_batch(
    toy_models: dict[str, Path], tmp_path: Path, workers: int
) -> None:
    """A decoder that passes the gate and then raises is rolled back like a failing inference, whether
    the post thread decodes (one worker) or the inference workers do (several)."""
    from tests.support.flaky import flaky_package

    flaky = flaky_package(toy_models["yolo_v2"], tmp_path / "flaky")
    reports: list[SwapReport] = []
    with Pipeline(toy_models["yolo"], STREAMS, max_batch=4, infer_workers=workers) as p:
        assert p.infer_workers == workers
        t = _swap_later(p, flaky, 0.6, reports, health_window_s=30.0)
        per_stream = _collect(p)
        t.join()
        history = [e.stage for e in p.swap_history]
        assert p.model.ref == "toy-yolo:1.0.0"
    assert reports[0].ok, reports[0].error
    assert "rollback" in history
    assert any("decoding failed" in e.message for e in p.swap_history if e.stage == "rollback")
    _check_invariants(per_stream, 120)
    versions = Counter(r.model_version for results in per_stream.values() for r in results)
    assert versions["2.0.0"] > 0 and versions["1.0.0"] > 0


def test_batches_still_bound_to_a_rolled_back_decoder_are_rerun_not_fatal(
    toy_models: dict[str, Path], tmp_path: Path
) -> None:
    """The new version's decoder fails and takes its time about it: the batches inferred on that version
    meanwhile reach the decoder after the rollback. They are re-run on the version serving then, like
    the one that failed (they used to fail the whole pipeline: the version was no longer watched)."""
    from tests.support.flaky import flaky_package

    flaky = flaky_package(toy_models["yolo_v2"], tmp_path / "flaky", slow=True)
    reports: list[SwapReport] = []
    with Pipeline(toy_models["yolo"], STREAMS, max_batch=4, infer_workers=1) as p:
        t = _swap_later(p, flaky, 0.6, reports, health_window_s=30.0)
        per_stream = _collect(p)
        t.join()
    assert reports[0].ok, reports[0].error
    assert [e.stage for e in p.swap_history].count("rollback") == 1
    _check_invariants(per_stream, 120)
