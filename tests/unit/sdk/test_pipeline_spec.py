"""Pipeline specs: the strict schema (from the registries), the rules of their own (model names, stream
ids, no credentials), diffs, secret references, and a spec change applied live with ``reconfigure``."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

from edgefleet.sdk import ConfigError, Pipeline, PipelineConfig, Result
from edgefleet.sdk._spec import diff_specs, load_pipeline_spec, resolve_secrets, secret_refs

V1 = """
name: site-a
version: 1
pipelines:
  entrance:
    model: nanodet-m
    sources:
      - {type: synthetic, id: cam1, width: 64, height: 48, fps: 30}
      - "cam2=synthetic:?width=64&height=48&fps=30"
    analytics: [{type: track}, {type: zones, zones: [{name: door, points: [[0, 0], [30, 0], [30, 30]]}]}]
    max_batch: 4
"""
V2 = (
    V1.replace("version: 1", "version: 2")
    .replace('      - "cam2=', '      - {type: synthetic, id: cam3, width: 64, height: 48, fps: 30}\n      - "cam2=')
    .replace("[[0, 0], [30, 0], [30, 30]]", "[[0, 0], [40, 0], [40, 40]]")
)


def test_a_spec_loads_and_its_identity_is_its_content() -> None:
    a, b = load_pipeline_spec(V1), load_pipeline_spec(V1)
    assert a.ref == "site-a:1" and a.sha256() == b.sha256()
    assert load_pipeline_spec(V2).sha256() != a.sha256()
    assert str(a.pipelines["entrance"].model) == "nanodet-m"
    again = load_pipeline_spec(a.document())  # what the controller stores reads back to the same spec
    assert again == a and again.sha256() == a.sha256()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("id: cam1, ", ""), "sources.0 needs a stream id"),
        (lambda t: t.replace('"cam2=', '"'), "sources.1 needs a stream id"),
        (lambda t: t.replace("model: nanodet-m", "model: models/nanodet-m"), "model must be a model name"),
        (lambda t: t.replace("type: synthetic, id: cam1", "type: nosuch, id: cam1"), "nosuch"),
        (lambda t: t.replace("fps: 30}", "fps: 30, colour: red}"), "colour"),
        (lambda t: t.replace("id: cam1", "id: cam2"), "stream id 'cam2' is used twice"),
        (lambda t: t.replace("version: 1", "version: 0"), "version"),
        (
            lambda t: t.replace(
                "{type: synthetic, id: cam1, width: 64, height: 48, fps: 30}",
                '{type: network, id: cam1, url: "rtsp://admin:hunter2@10.0.0.5/stream"}',
            ),
            r"password in its URL; put it in a sealed secret",
        ),
    ],
)
def test_a_bad_spec_is_one_clear_error(edit: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        load_pipeline_spec(edit(V1), "spec.yaml")  # type: ignore[operator]
    assert str(err.value).startswith("spec.yaml: ")
    assert "hunter2" not in str(err.value)


def test_secret_references_resolve_only_on_the_device() -> None:
    text = V1.replace(
        "{type: synthetic, id: cam1, width: 64, height: 48, fps: 30}",
        '{type: network, id: cam1, url: "rtsp://${secret:cam1-login}@10.0.0.5/stream"}',
    )
    spec = load_pipeline_spec(text)
    assert secret_refs(spec) == {"cam1-login"}
    assert "${secret:cam1-login}" in spec.canonical()
    resolved = resolve_secrets(spec.pipelines["entrance"], {"cam1-login": "admin:hunter2"})
    assert "admin:hunter2@10.0.0.5" in resolved.model_dump_json()
    with pytest.raises(ConfigError, match="'cam1-login' is not sealed to this device"):
        resolve_secrets(spec.pipelines["entrance"], {})


def test_the_diff_says_what_a_device_will_change() -> None:
    lines = diff_specs(load_pipeline_spec(V1), load_pipeline_spec(V2))
    assert lines == ["  entrance: + stream cam3", "  entrance: ~ analytics zones"]
    assert diff_specs(None, load_pipeline_spec(V1)) == ["+ pipeline entrance (2 stream(s), model nanodet-m)"]
    batch = V2.replace("max_batch: 4", "max_batch: 8")
    assert "  entrance: ~ max_batch (restarts the pipeline)" in diff_specs(
        load_pipeline_spec(V2), load_pipeline_spec(batch)
    )


def test_reconfigure_applies_a_spec_change_live(toy_models: dict[str, Path]) -> None:
    v1, v2 = (load_pipeline_spec(t).pipelines["entrance"] for t in (V1, V2))
    seqs: dict[str, list[int]] = {}
    zones: set[str] = set()
    lock = threading.Lock()

    def on(r: Result) -> None:
        with lock:
            seqs.setdefault(r.stream_id, []).append(r.sequence)
            zones.update(z.name for z in r.regions)

    config = PipelineConfig.model_validate({**v1.model_dump(), "model": toy_models["yolo"]})
    p = Pipeline.from_config(config, on_result=on).start()
    try:
        time.sleep(0.5)
        done = p.reconfigure(v2)
        assert done == ["+ stream cam3", "~ analytics zones"]
        time.sleep(0.5)
        with pytest.raises(ConfigError, match="cannot change max_batch live"):
            p.reconfigure(v2.model_copy(update={"max_batch": 8}))
        assert p.reconfigure(v2) == []
    finally:
        p.stop()
        p.close()
    assert p.error is None
    for sid in ("cam1", "cam2"):
        assert seqs[sid][0] == 0 and all(b == a + 1 for a, b in itertools.pairwise(seqs[sid]))
    assert seqs["cam3"][0] == 0
    assert [s.stream_id for s in p.specs] == ["cam1", "cam2", "cam3"]


def test_stats_taken_while_a_stream_is_added_or_removed(toy_models: dict[str, Path]) -> None:
    """Found by a loaded full run: the agent's status report (``stats()`` on a worker thread) iterated the
    streams while a spec's live change added one; the RuntimeError killed the agent's status reports, the
    controller took the silent device for gone and passed its wave. The change is made here from inside the
    iteration, where the other thread's would land."""
    v1, v2 = (load_pipeline_spec(t).pipelines["entrance"] for t in (V1, V2))
    config = PipelineConfig.model_validate({**v1.model_dump(), "model": toy_models["yolo"]})
    p = Pipeline.from_config(config).start()
    try:
        metrics = p._streams["cam1"]
        plain = metrics.snapshot
        for target, present in ((v2, True), (v1, False)):

            def changing(target: PipelineConfig = target) -> object:
                metrics.snapshot = plain  # type: ignore[method-assign]
                p.reconfigure(target)
                return plain()

            metrics.snapshot = changing  # type: ignore[method-assign]
            assert set(p.stats().streams) >= {"cam1", "cam2"}
            assert ("cam3" in p.stats().streams) is present
    finally:
        p.stop()
        p.close()
    assert p.error is None
