"""The extension seam (``edgefleet.sdk._registry``): every kind registers in-process through
``register_<kind>``, validates like a discriminated union on ``type`` with errors that name the kind,
the key and the field, and a plugin whose library is missing drops out naming what to install."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
from collections import Counter
from collections.abc import Mapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import yaml

from edgefleet.sdk import (
    AnalyticsConfig,
    AnalyticsContext,
    AnalyticsError,
    AnalyticsStage,
    Backend,
    BackendConfig,
    BackendError,
    ConfigError,
    DecodeContext,
    Decoded,
    Decoder,
    DecoderConfig,
    DecoderError,
    ManifestError,
    ModelChange,
    OnnxRuntimeConfig,
    Pipeline,
    PipelineConfig,
    PipelineError,
    Result,
    Sink,
    SinkConfig,
    SinkContext,
    Source,
    SourceConfig,
    SourceError,
    SourceSpec,
    load_package,
    register_analytics,
    register_backend,
    register_decoder,
    register_sink,
    register_source,
)
from edgefleet.sdk._registry import Registry

STREAMS = [f"cam{i}=synthetic:?width=320&height=240&fps=30&frames=120&live=false" for i in range(4)]


# --- decoders ---------------------------------------------------------------------------------------
class MaxScoreConfig(DecoderConfig):
    type: Literal["test-max-score"] = "test-max-score"
    floor: float = 0.0


class MaxScoreDecoder(Decoder):
    """One classification per frame: the largest value of the first output (or ``floor``)."""

    def __init__(self, config: MaxScoreConfig, ctx: DecodeContext) -> None:
        self.floor, self.output = config.floor, ctx.output_names[0]

    def decode(self, outputs: Mapping[str, np.ndarray], transforms: Any) -> list[Decoded]:
        from edgefleet.sdk import Classification

        top = np.asarray(outputs[self.output]).reshape(len(transforms), -1).max(axis=1)
        return [Decoded(classifications=(Classification(0, "max", max(float(v), self.floor)),)) for v in top]


def _with_decoder(src: Path, dst: Path, decoder: dict[str, Any]) -> Path:
    shutil.copytree(src, dst)
    data = yaml.safe_load((dst / "manifest.yaml").read_text())
    data["decoder"] = decoder
    data["task"] = "raw"
    (dst / "manifest.yaml").write_text(yaml.safe_dump(data))
    return dst


def test_a_registered_decoder_config_is_checked_when_the_manifest_is_read(
    toy_models: dict[str, Path], tmp_path: Path
) -> None:
    register_decoder("test-max-score", MaxScoreConfig, MaxScoreDecoder, replace=True)
    good = _with_decoder(toy_models["yolo"], tmp_path / "good", {"type": "test-max-score", "floor": 1000.0})
    pkg = load_package(good)
    assert isinstance(pkg.manifest.decoder.config, MaxScoreConfig) and pkg.manifest.decoder.config.floor == 1000.0
    with Pipeline(pkg, ["synthetic:?width=64&height=48&frames=3"]) as p:
        results = list(p.results())
    assert [r.classifications[0].score for r in results] == [1000.0] * 3  # the floor came through the config
    bad = _with_decoder(toy_models["yolo"], tmp_path / "bad", {"type": "test-max-score", "floor": "high"})
    with pytest.raises(ManifestError, match=r"manifest\.yaml: decoder \(test-max-score\): floor: Input should be"):
        load_package(bad)


def test_a_manifest_keeps_an_unknown_decoder_for_the_device_that_has_it(
    toy_models: dict[str, Path], tmp_path: Path
) -> None:
    """Read anywhere (the controller has no app plugins), refused only where it is built."""
    pkg = load_package(_with_decoder(toy_models["yolo"], tmp_path / "p", {"type": "nobody-has-this", "k": 1}))
    assert pkg.manifest.decoder.config is None and pkg.manifest.decoder.params() == {"k": 1}
    with pytest.raises(DecoderError, match=r"unknown decoder 'nobody-has-this' \(known: .*yolo.*\)"):
        Pipeline(pkg, ["synthetic:?frames=1"]).start()


def test_registering_checks_the_key_the_config_and_the_factory() -> None:
    class Other(DecoderConfig):
        type: Literal["other"] = "other"

    with pytest.raises(DecoderError, match=r'Other\.type must be declared Literal\["test-x"\]'):
        register_decoder("test-x", Other, MaxScoreDecoder)
    with pytest.raises(DecoderError, match="must be 1-64 letters"):
        register_decoder("bad key", MaxScoreConfig, MaxScoreDecoder)
    with pytest.raises(DecoderError, match="give the factory"):
        register_decoder("test-max-score", MaxScoreConfig)
    register_decoder("test-max-score", MaxScoreConfig, MaxScoreDecoder, replace=True)
    with pytest.raises(DecoderError, match="already registered"):
        register_decoder("test-max-score", MaxScoreConfig, MaxScoreDecoder)


# --- analytics --------------------------------------------------------------------------------------
class TaggerConfig(AnalyticsConfig):
    type: Literal["test-tagger"] = "test-tagger"
    label: str = "seen"


class Tagger(AnalyticsStage):
    """Adds a classification naming the stage and the frame's running count per stream; records what
    it was told, on which thread."""

    def __init__(self, config: TaggerConfig) -> None:
        self.label = config.label
        self.events: list[tuple[str, Any]] = []
        self.counts: Counter[str] = Counter()
        self.threads: set[str] = set()
        self.closed = False

    def open(self, ctx: AnalyticsContext) -> None:
        self.events.append(("open", ctx))

    def process(self, results: list[Result]) -> list[Result]:
        from edgefleet.sdk import Classification

        self.threads.add(threading.current_thread().name)
        self.events.append(("batch", [r.model_version for r in results]))
        out = []
        for r in results:
            self.counts[r.stream_id] += 1
            tag = Classification(-1, f"{self.label}:{self.counts[r.stream_id]}", 1.0)
            out.append(dataclasses.replace(r, classifications=(*r.classifications, tag)))
        return out

    def on_model_change(self, change: ModelChange) -> None:
        self.events.append(("change", change))

    def stats(self) -> Mapping[str, float | int]:
        return {"results_total": sum(self.counts.values())}

    def close(self) -> None:
        self.closed = True


def test_analytics_from_a_config_run_on_the_result_thread_before_the_sinks(toy_models: dict[str, Path]) -> None:
    made: list[Tagger] = []

    def factory(config: TaggerConfig) -> Tagger:
        made.append(Tagger(config))
        return made[-1]

    register_analytics("test-tagger", TaggerConfig, factory, replace=True)
    config = PipelineConfig.model_validate(
        {
            "model": str(toy_models["yolo"]),
            "sources": ["a=synthetic:?width=64&height=48&frames=5", "b=synthetic:?width=64&height=48&frames=5"],
            "max_batch": 4,
            "analytics": [{"type": "test-tagger", "label": "first"}, {"type": "test-tagger", "label": "second"}],
        }
    )
    seen: list[Result] = []
    stats = Pipeline.from_config(config, on_result=seen.append).run()
    first, second = made
    assert first.threads == second.threads == {"edgefleet-post"}
    assert first.events[0][0] == "open" and first.closed and second.closed
    ctx = first.events[0][1]
    assert (ctx.stream_ids, ctx.model_name, ctx.model_version) == (("a", "b"), "toy-yolo", "1.0.0")
    assert len(seen) == 10
    for stream in ("a", "b"):
        tags = [[c.label for c in r.classifications] for r in seen if r.stream_id == stream]
        # in list order, each frame once, in order per stream, and the callback sink saw the replacements
        assert tags == [[f"first:{i}", f"second:{i}"] for i in range(1, 6)]
    assert stats.analytics == {"test-tagger": {"results_total": 10}, "test-tagger#2": {"results_total": 10}}


def test_analytics_instances_and_configs_keep_their_order(toy_models: dict[str, Path]) -> None:
    register_analytics("test-tagger", TaggerConfig, Tagger, replace=True)
    mine = Tagger(TaggerConfig(label="mine"))
    with Pipeline(
        toy_models["yolo"], ["synthetic:?width=64&height=48&frames=2"], analytics=[mine, {"type": "test-tagger"}]
    ) as p:
        results = list(p.results())
    assert [[c.label for c in r.classifications] for r in results] == [["mine:1", "seen:1"], ["mine:2", "seen:2"]]


def test_analytics_configs_validate_as_a_discriminated_union(toy_models: dict[str, Path], tmp_path: Path) -> None:
    from edgefleet.sdk import load_pipeline_config

    register_analytics("test-tagger", TaggerConfig, Tagger, replace=True)
    with pytest.raises(ConfigError, match=r"analytics\.1 \(test-tagger\): colour: Extra inputs are not permitted"):
        Pipeline(
            toy_models["yolo"],
            ["synthetic:"],
            analytics=[{"type": "test-tagger"}, {"type": "test-tagger", "colour": 1}],
        )

    def load(analytics: list[Any]) -> PipelineConfig:
        path = tmp_path / "pipeline.yaml"
        path.write_text(
            yaml.safe_dump({"model": str(toy_models["yolo"]), "sources": ["synthetic:"], "analytics": analytics})
        )
        return load_pipeline_config(path)

    with pytest.raises(
        ConfigError, match=r"pipeline\.yaml: analytics\.0: unknown analytics 'tracker' \(known: .*test-tagger"
    ):
        load([{"type": "tracker"}])
    with pytest.raises(ConfigError, match=r"analytics\.0: needs a type field \(one of: .*test-tagger"):
        load([{"label": "x"}])
    with pytest.raises(ConfigError, match=r"analytics\.0: must be a mapping with a type field, got str"):
        load(["test-tagger"])
    with pytest.raises(ConfigError, match=r"analytics\.0 \(test-tagger\): label: Input should be a valid string"):
        load([{"type": "test-tagger", "label": 3}])
    dumped = load([{"type": "test-tagger", "label": "x"}]).model_dump()
    assert dumped["analytics"] == ({"type": "test-tagger", "label": "x"},)  # every field of the entry's schema


def test_a_stage_that_breaks_the_contract_fails_the_pipeline_naming_it(toy_models: dict[str, Path]) -> None:
    class Dropper(AnalyticsStage):
        def process(self, results: list[Result]) -> list[Result]:
            return results[1:]

    with (
        pytest.raises(PipelineError, match=r"analytics Dropper: process\(\) must return a list of \d+ results"),
        Pipeline(toy_models["yolo"], ["synthetic:?width=64&height=48&frames=4"], analytics=[Dropper()]) as p,
    ):
        list(p.results())
    assert isinstance(p.error, AnalyticsError)


def test_analytics_hear_the_cutover_and_the_rollback_before_the_new_versions_results(
    toy_models: dict[str, Path], tmp_path: Path
) -> None:
    """A swap to a version whose decoder fails in its health window: cut-over to 2.0.0, then rollback
    to 1.0.0; every change announced before the first batch of the version it names."""
    from tests.support.flaky import flaky_package

    flaky = flaky_package(toy_models["yolo_v2"], tmp_path / "flaky")
    stage = Tagger(TaggerConfig())
    with Pipeline(toy_models["yolo"], STREAMS, max_batch=4, analytics=[stage]) as p:
        threading.Timer(0.6, lambda: p.swap_model(flaky, health_window_s=30.0)).start()
        results = list(p.results())
    assert "rollback" in [e.stage for e in p.swap_history]
    assert len(results) == 480
    changes = [c for e, c in stage.events if e == "change"]
    assert [(c.kind, c.old_version, c.new_version) for c in changes] == [
        ("cutover", "1.0.0", "2.0.0"),
        ("rollback", "2.0.0", "1.0.0"),
    ]
    assert changes[0].new_labels == ("a", "b", "c", "d", "e") and changes[1].new_labels == changes[0].old_labels
    serving = "1.0.0"
    for event, value in stage.events[1:]:
        if event == "change":
            serving = value.new_version
        else:
            assert set(value) == {serving}, "a batch of a version reached process() before its change"


# --- sources ----------------------------------------------------------------------------------------
class CounterConfig(SourceConfig):
    type: Literal["test-counter"] = "test-counter"
    n: int = 3
    value: int = 0


class CounterSource(Source):
    """``n`` frames of grey ``value``, 32x24."""

    def __init__(self, config: CounterConfig, spec: SourceSpec) -> None:
        super().__init__(spec)
        self.config, self.i = config, 0

    def open(self) -> None:
        self.i = 0

    def frame_shape(self) -> tuple[int, int] | None:
        return (24, 32)

    def read(self, out: np.ndarray | None) -> np.ndarray | None:
        if self.i >= self.config.n:
            return None
        self.i += 1
        image = out if out is not None else np.empty((24, 32, 3), np.uint8)
        image[:] = self.config.value
        return image

    def close(self) -> None:
        pass


def _counter_fields(text: str) -> dict[str, str]:
    from urllib.parse import parse_qsl

    if text.endswith(".counter"):
        return {"n": text.removesuffix(".counter").rpartition("/")[2]}
    return dict(parse_qsl(text.partition("?")[2]))


def _register_counter() -> None:
    register_source(
        "test-counter",
        CounterConfig,
        CounterSource,
        replace=True,
        prefixes=("count:",),
        match=lambda text: text.endswith(".counter"),
        parse=_counter_fields,
    )


def test_a_registered_source_takes_its_strings_and_its_mappings(toy_models: dict[str, Path]) -> None:
    from edgefleet.sdk import parse_source

    _register_counter()
    spec = parse_source("c0=COUNT:?n=2&value=7", 5)
    assert (spec.kind, spec.stream_id, spec.live) == ("test-counter", "c0", False)
    assert isinstance(spec.config, CounterConfig) and (spec.config.n, spec.config.value) == (2, 7)
    assert parse_source("clips/4.counter").kind == "test-counter"  # its predicate before the file fallback
    sources = ["a=count:?n=2", {"type": "test-counter", "id": "b", "n": 3}, CounterConfig(id="c", n=1)]
    with Pipeline(toy_models["yolo"], sources) as p:
        per_stream = Counter(r.stream_id for r in p.results())
    assert per_stream == Counter({"a": 2, "b": 3, "c": 1})
    with pytest.raises(SourceError, match=r"count:\?n=many: option n must be an integer, got 'many'"):
        parse_source("count:?n=many")
    with pytest.raises(
        SourceError, match=r"unknown option colour for a test-counter source \(known: live, loop, n, queue"
    ):
        parse_source("count:?colour=red")


def test_source_mappings_validate_as_a_discriminated_union(toy_models: dict[str, Path]) -> None:
    def pipeline(*sources: Any) -> Pipeline:
        return Pipeline(toy_models["yolo"], list(sources))

    with pytest.raises(ConfigError, match=r"sources\.1 \(network\): url: Field required"):
        pipeline("synthetic:", {"type": "network"})
    with pytest.raises(ConfigError, match=r"sources\.0 \(network\): transport: Input should be 'tcp'"):
        pipeline({"type": "network", "url": "rtsp://10.0.0.5/x", "transport": "pigeon"})
    with pytest.raises(ConfigError, match=r"sources\.0 \(network\): url: Value error, rtsp://admin:\*\*\*@: no host"):
        pipeline({"type": "network", "url": "rtsp://admin:s3cret@"})
    with pytest.raises(ConfigError, match=r"sources\.0: unknown source 'webcam' \(known: .*network.*synthetic"):
        pipeline({"type": "webcam"})
    with pytest.raises(ConfigError, match=r"sources\.0 \(synthetic\): fps: Input should be less than 10000"):
        pipeline({"type": "synthetic", "fps": 20000})
    spec = pipeline({"type": "network", "id": "cam1", "url": "rtsp://10.0.0.5/x", "transport": "udp"}).specs[0]
    assert (spec.stream_id, spec.kind, spec.live, spec.uri) == ("cam1", "network", True, "rtsp://10.0.0.5/x")


def test_a_source_prefix_belongs_to_one_kind() -> None:
    class Other(SourceConfig):
        type: Literal["test-other"] = "test-other"

    with pytest.raises(SourceError, match=r"prefix 'rtsp://' is taken by source 'network'"):
        register_source("test-other", Other, CounterSource, prefixes=("RTSP://",), parse=dict)
    with pytest.raises(SourceError, match="need the parse function"):
        register_source("test-other", Other, CounterSource, prefixes=("other:",))


# --- sinks ------------------------------------------------------------------------------------------
class ListConfig(SinkConfig):
    type: Literal["test-list"] = "test-list"
    bucket: str


BUCKETS: dict[str, list[tuple[str, Any]]] = {}


class ListSink(Sink):
    def __init__(self, config: ListConfig, ctx: SinkContext) -> None:
        self.items = BUCKETS.setdefault(config.bucket, [])
        self.items.append(("ctx", (ctx.pipeline, ctx.stream_ids, dict(ctx.services))))

    def write(self, result: Result, frame: Any) -> None:
        self.items.append(("result", (result.stream_id, result.sequence)))


def test_a_registered_sink_is_built_from_its_config_with_the_pipelines_context(toy_models: dict[str, Path]) -> None:
    register_sink("test-list", ListConfig, ListSink, replace=True)
    config = PipelineConfig.model_validate(
        {
            "model": str(toy_models["yolo"]),
            "sources": ["a=synthetic:?width=64&height=48&frames=2", "b=synthetic:?width=64&height=48&frames=2"],
            "sinks": [{"type": "test-list", "bucket": "one"}],
        }
    )
    Pipeline.from_config(config, name="lobby", services={"clock": "wall"}, on_result=lambda r: None).run()
    (ctx, *results) = BUCKETS["one"]
    assert ctx == ("ctx", ("lobby", ("a", "b"), {"clock": "wall"}))
    assert sorted(v for _, v in results) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_sink_configs_validate_as_a_discriminated_union(toy_models: dict[str, Path]) -> None:
    def pipeline(*sinks: Any) -> Pipeline:
        return Pipeline(toy_models["yolo"], ["synthetic:"], sinks=list(sinks))

    with pytest.raises(ConfigError, match=r"sinks\.0 \(jsonl\): path: Field required"):
        pipeline({"type": "jsonl"})
    with pytest.raises(ConfigError, match=r"sinks\.1 \(video\): fps: Input should be greater than 0"):
        pipeline({"type": "jsonl", "path": "a.jsonl"}, {"type": "video", "path": "a.mp4", "fps": 0})
    with pytest.raises(ConfigError, match=r"sinks\.0: unknown sink 'kafka' \(known: .*jsonl.*video"):
        pipeline({"type": "kafka"})
    with pytest.raises(ConfigError, match=r"sinks must be a list of sinks"):
        Pipeline(toy_models["yolo"], ["synthetic:"], sinks={"type": "jsonl"})  # type: ignore[arg-type]


# --- backends ---------------------------------------------------------------------------------------
class CountingConfig(BackendConfig):
    type: Literal["test-counting"] = "test-counting"
    threads: int = 1


def _counting_backend(config: CountingConfig, device: str) -> Backend:
    """ONNX Runtime, counting the batches it runs: an application's own backend."""
    from edgefleet.sdk._backends._onnxruntime import OnnxRuntimeBackend

    class Counting(OnnxRuntimeBackend):
        batches = 0

        def infer(self, buffer: Any, n: int) -> dict[str, np.ndarray]:
            Counting.batches += 1
            return super().infer(buffer, n)

    made.append(Counting)
    return Counting(OnnxRuntimeConfig(intra_op_threads=config.threads), device)


made: list[type] = []


def test_a_registered_backend_is_chosen_by_its_type(toy_models: dict[str, Path], tmp_path: Path) -> None:
    from edgefleet.sdk import load_pipeline_config

    register_backend("test-counting", CountingConfig, _counting_backend, replace=True)
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": str(toy_models["yolo"]),
                "sources": ["synthetic:?width=64&height=48&frames=4"],
                "backend": {"type": "test-counting", "threads": 1},
                "infer_workers": 1,
            }
        )
    )
    stats = Pipeline.from_config(load_pipeline_config(path), on_result=lambda r: None).run()
    assert stats.results == 4 and made[-1].batches >= 4  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"backend \(test-counting\): threads: Input should be a valid integer"):
        Pipeline(toy_models["yolo"], ["synthetic:"], backend={"type": "test-counting", "threads": "many"})
    with pytest.raises(ConfigError, match=r"backend \(onnxruntime\): intra_op_threads: Input should be greater"):
        Pipeline(toy_models["yolo"], ["synthetic:"], backend={"type": "onnxruntime", "intra_op_threads": 0})
    with pytest.raises(ConfigError, match=r"backend: unknown backend 'openvino' \(known: .*onnxruntime, .*tensorrt"):
        Pipeline(toy_models["yolo"], ["synthetic:"], backend={"type": "openvino"})


def test_a_backend_factory_missing_its_library_names_the_extra() -> None:
    class NeedsConfig(BackendConfig):
        type: Literal["test-needs"] = "test-needs"

    def factory(config: NeedsConfig, device: str) -> Backend:
        import edgefleet_no_such_inference_lib  # type: ignore[import-not-found]  # noqa: F401

        raise AssertionError("unreachable")

    register_backend("test-needs", NeedsConfig, factory, extra="fast", replace=True)
    from edgefleet.sdk._backends import create_backend

    with pytest.raises(
        BackendError,
        match=r"backend 'test-needs' needs edgefleet_no_such_inference_lib, which is not installed: pip install 'fast'",
    ):
        create_backend(NeedsConfig(), "cpu")


# --- the registry's own rules -----------------------------------------------------------------------
def test_a_plugin_whose_library_is_missing_drops_out_naming_what_to_install(caplog: pytest.LogCaptureFixture) -> None:
    reg: Registry[DecoderConfig] = Registry("decoder", DecoderConfig, DecoderError, group="edgefleet.test-only")
    ep = EntryPoint("fancy", "edgefleet_no_such_module.fancy:register [gpu]", "edgefleet.test-only")
    with caplog.at_level(logging.INFO):
        reg._load(ep)
    assert "dropped out" in caplog.text and "edgefleet_no_such_module" in caplog.text
    reason = reg.unavailable()["fancy"]
    assert "needs edgefleet_no_such_module, which is not installed: pip install 'gpu'" in reason
    with pytest.raises(DecoderError, match=r"decoder 'fancy' is not available: entry point fancy = "):
        reg.entry("fancy")
    with pytest.raises(DecoderError, match=r"^here: decoder: decoder 'fancy' is not available"):
        reg.validate({"type": "fancy"}, "here")


def test_a_plugin_that_raises_or_registers_nothing_is_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    reg: Registry[DecoderConfig] = Registry("decoder", DecoderConfig, DecoderError, group="edgefleet.test-only")
    with caplog.at_level(logging.WARNING):
        reg._load(EntryPoint("boom", "json:loads", "edgefleet.test-only"))  # callable, raises on no args
        reg._load(EntryPoint("quiet", "builtins:dict", "edgefleet.test-only"))  # registers nothing
    assert "failed to load: TypeError" in reg.unavailable()["boom"]
    assert "registered no decoder named 'quiet'" in caplog.text
    assert reg.keys() == []
