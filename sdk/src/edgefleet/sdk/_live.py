"""Live changes to a running pipeline: sources, sinks and analytics stages added, removed and replaced
while every other stream keeps flowing.

How each change stays clean:

- **Sources.** A new source gets its own runner thread, frame pool and queue, and joins the batcher; its
  frames are batched with the rest from its first one. A removed source's runner is stopped on its own
  flag (a child of the pipeline's stop flag); what it had queued is still batched, and
  :meth:`LiveChanges.remove_source` returns once the last of those frames has its result delivered, so
  no result of that stream comes after it, and once its frame pool is freed (every slot, the one of
  each frame in flight too: not at a later garbage collection), without waiting for a source slow to
  close longer than its timeout. A replaced source goes on with the old one's stream id and
  the next sequence number. A new source that fails (a malformed URL; a camera that never answers keeps
  retrying) marks its own stream failed and never stops the pipeline.
- **Sinks and analytics stages** are opened on the calling thread, then put in place between two batches
  (the result thread holds a lock while it delivers one); a removed one is taken out the same way and
  closed on the calling thread after its last batch.

One change runs at a time (a lock); each either completes or leaves the pipeline as it was, with one
clear error.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from ._analytics import ANALYTICS, AnalyticsConfig, AnalyticsStage
from ._analytics._base import AnalyticsContext
from ._delivery import model_info
from ._errors import AnalyticsError, ConfigError, EdgefleetError, PipelineError
from ._frames import FrameQueue, OverflowPolicy
from ._health import stall_seconds
from ._metrics import StreamMetrics, StreamStats
from ._redact import redact
from ._sinks import SINKS, Sink, SinkConfig, SinkContext, build_sink
from ._sinks._paths import check_sink_paths, pipeline_reads
from ._sources import SOURCES, SourceConfig, SourceSpec, create_source, parse_source
from ._sources._runner import SourceRunner
from ._spec import LivePlan
from ._validation import format_validation_error

# ``Pipeline`` below is the pipeline these changes belong to (typed ``Any``: ``_pipeline`` imports this
# module, and the import contract allows no circle, not even a type-only one).
Pipeline = Any

__all__ = ["LiveChanges", "NamedSinks", "SourceItem", "apply_plan"]

_log = logging.getLogger(__name__)
SourceItem = str | SourceSpec | SourceConfig | Mapping[str, Any]


class NamedSinks:
    """A pipeline's sinks by name: a config's ``type`` (``jsonl``), an instance's class name, or the name
    given; ``#2``, ``#3`` for repeats. ``ordered`` is what the result thread iterates: sinks that draw on
    the frame last."""

    def __init__(self) -> None:
        self.by_name: dict[str, Sink] = {}

    def name_for(self, base: str) -> str:
        if base not in self.by_name:
            return base
        n = 2
        while f"{base}#{n}" in self.by_name:
            n += 1
        return f"{base}#{n}"

    def ordered(self) -> list[Sink]:
        return sorted(self.by_name.values(), key=lambda s: s.needs_pixels)


class LiveChanges:
    """The live-change operations of one running :class:`~edgefleet.sdk.Pipeline` (it delegates here)."""

    def __init__(self, pipeline: Pipeline, allocator: Any) -> None:
        self.p = pipeline
        self.allocator = allocator
        self.lock = threading.Lock()
        self._added = len(pipeline.specs)  # the index of the next source (its default id: s<index>)

    # --- sources -----------------------------------------------------------------------------------
    def _check_running(self, what: str) -> None:
        state = self.p._state
        if state != "running" or self.p._flow.stop_sources.is_set():
            raise PipelineError(f"cannot {what}: the pipeline is {state if state != 'running' else 'stopping'}")

    def _spec(self, source: SourceItem, stream_id: str | None = None) -> SourceSpec:
        """Validate ``source`` into a spec (with ``stream_id`` when given) and build its source to check
        it (a missing extra, a malformed config); the source built is thrown away."""
        if isinstance(source, SourceSpec):
            spec = source
        elif isinstance(source, str):
            spec = parse_source(source, self._added)
        elif isinstance(source, (SourceConfig, Mapping)):
            try:
                config = source if isinstance(source, SourceConfig) else SOURCES.coerce(source)
            except ValidationError as exc:
                raise ConfigError(format_validation_error(exc, "source")) from None
            spec = SOURCES.spec(config, self._added)
        else:
            raise ConfigError(f"a source is a string, a SourceConfig or a mapping, got {type(source).__name__}")
        if stream_id is not None and spec.stream_id != stream_id:
            if spec.stream_id != f"s{self._added}":  # it names its own id
                raise ConfigError(f"the replacement of {stream_id!r} names another stream id, {spec.stream_id!r}")
            spec = _with_id(spec, stream_id)
        create_source(spec).close()  # raises what a bad config raises, before anything changes
        return spec

    def _runner_for(self, stream_id: str) -> SourceRunner:
        runners: list[SourceRunner] = self.p._runners
        for r in runners:
            if r.source.stream_id == stream_id:
                return r
        known = ", ".join(r.source.stream_id for r in self.p._runners) or "none"
        raise ConfigError(f"no stream {stream_id!r} in this pipeline (streams: {known})")

    def add_source(self, source: SourceItem) -> SourceSpec:
        with self.lock:
            self._check_running("add a source")
            spec = self._spec(source)
            if any(r.source.stream_id == spec.stream_id for r in self.p._runners):
                raise ConfigError(f"stream id {spec.stream_id!r} is already in this pipeline")
            self._start(spec, first_sequence=0)
            return spec

    def remove_source(self, stream_id: str, timeout: float = 10.0) -> StreamStats:
        with self.lock:
            self._check_running("remove a source")
            runner = self._runner_for(stream_id)
            return self._stop(runner, timeout)

    def replace_source(self, stream_id: str, source: SourceItem, timeout: float = 10.0) -> SourceSpec:
        with self.lock:
            self._check_running("replace a source")
            runner = self._runner_for(stream_id)
            spec = self._spec(source, stream_id)
            self._stop(runner, timeout)
            self._start(spec, first_sequence=runner.next_sequence)
            return spec

    def _start(self, spec: SourceSpec, first_sequence: int) -> None:
        p = self.p
        model = p.slot.current
        metrics = StreamMetrics(spec.stream_id, spec.live, stall_seconds(spec))
        metrics.model_ref = model.ref
        policy = OverflowPolicy.DROP_OLDEST if spec.live else OverflowPolicy.BLOCK
        fq = FrameQueue(spec.queue_size, policy, p._cond)
        hold = p._batch is not None and p._batch.hold_pixels
        share = -(-model.max_batch // (len(p._runners) + 1))
        held = 10 if p._post is not None and p._post.handoff is not None else 7  # as Pipeline._start_sources
        in_flight = (share * held if hold else min(share * 2, model.max_batch)) + 1
        stop = p._flow.stop_sources.child()
        runner = SourceRunner(
            create_source(spec),
            fq,
            metrics,
            p.copies,
            stop,
            functools.partial(_isolated_failure, spec.stream_id),
            pool_size=spec.queue_size + min(in_flight, 64),
            allocator=self.allocator,
            max_frames=p.config.max_frames,
            first_sequence=first_sequence,
            pipeline=p._name,
        )
        p._streams[spec.stream_id] = metrics
        p._specs = [*p._specs, spec]
        p._runners = [*p._runners, runner]
        self._added += 1
        assert p._batch is not None  # running: the stages exist
        p._batch.batcher.add(fq)
        runner.start()
        _log.info("stream %s added (%s)", spec.stream_id, runner.display_uri)

    def _stop(self, runner: SourceRunner, timeout: float) -> StreamStats:
        """Stop one source, let what it queued be delivered, then forget it and free its frame pool.
        Returns its last stats."""
        p = self.p
        sid = runner.source.stream_id
        deadline = time.monotonic() + timeout
        assert p._batch is not None and p._post is not None
        # Retired first: a queue that finishes is then dropped, not taken for the end of every stream.
        p._batch.batcher.retire(runner.queue)
        stop = runner.stop
        stop.set()
        metrics = p._streams[sid]
        read = runner.reading_done.wait(max(0.0, deadline - time.monotonic()))
        if not read:
            _log.warning("stream %s: its source is still reading; removed anyway", sid)
        else:
            runner.pool = None  # its loop is over: the free slots go now, each leased one with its frame
            expected = runner.queue.accepted - runner.queue.dropped
            if not self._wait(lambda: metrics.results.total >= expected, deadline):
                left = expected - metrics.results.total
                _log.warning("stream %s: %d result(s) still in flight at removal", sid, left)
        if isinstance(stop, threading.Event):
            p._flow.stop_sources.forget(stop)
        with p._post.lock:
            for _, stage in p._post.analytics.stages:
                _call_hook(stage.on_stream_removed, sid, "analytics")
            for sink in p._post.sinks:
                _call_hook(sink.on_stream_removed, sid, "sink")
            p._runners = [r for r in p._runners if r is not runner]
            p._specs = [s for s in p._specs if s.stream_id != sid]
            del p._streams[sid]
        # Its frame memory, freed by the last frame's going (a source still reading keeps its pool until
        # its thread ends): after the hooks, since a sink may let go of a frame there.
        if read and not self._wait(lambda: runner.slots_alive() == 0, deadline):
            _log.warning("stream %s: %d frame slot(s) still held after its removal", sid, runner.slots_alive())
        runner.join(max(0.0, deadline - time.monotonic()))
        if runner.is_alive():
            _log.warning("stream %s: its source is still closing; removed anyway", sid)
        _log.info("stream %s removed", sid)
        final: StreamStats = metrics.snapshot()
        return final

    def _wait(self, done: Callable[[], bool], deadline: float) -> bool:
        """Poll ``done`` until it is true (True) or ``deadline`` passes (False); the pipeline aborting
        ends the wait too (nothing more will be delivered)."""
        while not done():
            if self.p._flow.abort.is_set():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    # --- sinks -------------------------------------------------------------------------------------
    def _build_sink(self, sink: Sink | SinkConfig | Mapping[str, Any]) -> tuple[Sink, str]:
        p = self.p
        if isinstance(sink, Sink):
            return sink, type(sink).__name__
        try:
            config = sink if isinstance(sink, SinkConfig) else SINKS.coerce(sink)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, "sink")) from None
        ctx = SinkContext(p._name, tuple(s.stream_id for s in p._specs), dict(p._services))
        return build_sink(config, ctx), config.type

    def _open_sink(self, sink: Sink, others: list[Sink]) -> None:
        p = self.p
        assert p._batch is not None
        if sink.needs_pixels and not p._batch.hold_pixels:
            raise ConfigError(
                f"{type(sink).__name__} draws on the frames, and this pipeline started without such a sink "
                "(frame slots go back to the pool after preprocessing): restart the pipeline with it"
            )
        check_sink_paths([*others, sink], pipeline_reads(p._specs, p._model_root()), [s.stream_id for s in p._specs])
        sink.stream_fps = p._stream_fps
        sink.open()

    def add_sink(self, sink: Sink | SinkConfig | Mapping[str, Any], name: str | None = None) -> str:
        with self.lock:
            self._check_running("add a sink")
            p = self.p
            built, base = self._build_sink(sink)
            key: str = p._named_sinks.name_for(name or base)
            if name is not None and key != name:
                raise ConfigError(f"a sink named {name!r} is already in this pipeline")
            self._open_sink(built, list(p._named_sinks.by_name.values()))
            self._put_sinks({**p._named_sinks.by_name, key: built})
            return key

    def remove_sink(self, name: str) -> None:
        with self.lock:
            self._check_running("remove a sink")
            old = self._sink(name)
            rest = {k: v for k, v in self.p._named_sinks.by_name.items() if k != name}
            self._put_sinks(rest)
            old.close()

    def replace_sink(self, name: str, sink: Sink | SinkConfig | Mapping[str, Any]) -> None:
        with self.lock:
            self._check_running("replace a sink")
            old = self._sink(name)
            built, _ = self._build_sink(sink)
            others = [v for k, v in self.p._named_sinks.by_name.items() if k != name]
            self._open_sink(built, others)
            self._put_sinks({k: (built if k == name else v) for k, v in self.p._named_sinks.by_name.items()})
            old.close()

    def _sink(self, name: str) -> Sink:
        got: Sink | None = self.p._named_sinks.by_name.get(name)
        if got is None:
            known = ", ".join(self.p._named_sinks.by_name) or "none"
            raise ConfigError(f"no sink named {name!r} in this pipeline (sinks: {known})")
        return got

    def _put_sinks(self, by_name: dict[str, Sink]) -> None:
        p = self.p
        assert p._post is not None
        with p._post.lock:  # between two batches
            p._named_sinks.by_name = by_name
            p._sinks = p._named_sinks.ordered()
            p._post.sinks = p._sinks

    # --- analytics ---------------------------------------------------------------------------------
    def _build_stage(self, stage: AnalyticsStage | AnalyticsConfig | Mapping[str, Any]) -> tuple[AnalyticsStage, str]:
        if isinstance(stage, AnalyticsStage):
            return stage, type(stage).__name__
        try:
            config = stage if isinstance(stage, AnalyticsConfig) else ANALYTICS.coerce(stage)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, "analytics")) from None
        try:
            return self._runner().stage(config), config.type
        except AnalyticsError as exc:
            raise ConfigError(str(exc)) from None

    def _open_stage(self, stage: AnalyticsStage) -> None:
        p = self.p
        name, version, labels = model_info(p.slot.current)
        stage.open(AnalyticsContext(tuple(s.stream_id for s in p._specs), name, version, labels))

    def add_analytics(
        self, stage: AnalyticsStage | AnalyticsConfig | Mapping[str, Any], name: str | None, index: int | None
    ) -> str:
        with self.lock:
            self._check_running("add an analytics stage")
            built, base = self._build_stage(stage)
            runner = self._runner()
            names = {n for n, _ in runner.stages}
            key = name or base
            n = 2
            while key in names and name is None:
                key, n = f"{base}#{n}", n + 1
            if key in names:
                raise ConfigError(f"an analytics stage named {key!r} is already in this pipeline")
            self._open_stage(built)
            stages = list(runner.stages)
            stages.insert(len(stages) if index is None else index, (key, built))
            self._put_stages(stages, opened=built)
            return key

    def remove_analytics(self, name: str) -> None:
        with self.lock:
            self._check_running("remove an analytics stage")
            runner = self._runner()
            old = self._stage(name)
            self._put_stages([(n, s) for n, s in runner.stages if n != name], closed=old)
            old.close()

    def replace_analytics(self, name: str, stage: AnalyticsStage | AnalyticsConfig | Mapping[str, Any]) -> None:
        with self.lock:
            self._check_running("replace an analytics stage")
            runner = self._runner()
            old = self._stage(name)
            built, _ = self._build_stage(stage)
            self._open_stage(built)
            self._put_stages([(n, built if n == name else s) for n, s in runner.stages], opened=built, closed=old)
            old.close()

    def _runner(self) -> Any:
        assert self.p._post is not None
        return self.p._post.analytics

    def _stage(self, name: str) -> AnalyticsStage:
        stages: list[tuple[str, AnalyticsStage]] = self._runner().stages
        for n, s in stages:
            if n == name:
                return s
        known = ", ".join(n for n, _ in self._runner().stages) or "none"
        raise ConfigError(f"no analytics stage named {name!r} in this pipeline (stages: {known})")

    def _put_stages(
        self,
        stages: list[tuple[str, AnalyticsStage]],
        opened: AnalyticsStage | None = None,
        closed: AnalyticsStage | None = None,
    ) -> None:
        p = self.p
        assert p._post is not None
        runner = p._post.analytics
        with p._post.lock:
            runner.stages = stages
            if opened is not None:
                runner._opened.append(opened)
            if closed is not None and closed in runner._opened:
                runner._opened.remove(closed)


def apply_plan(p: Pipeline, plan: LivePlan) -> list[str]:
    """Apply a :class:`~edgefleet.sdk._spec.LivePlan` to a running pipeline, stream removals first;
    returns the lines of what was done. Every new or replaced source is checked before anything changes;
    a later failure raises :class:`PipelineError` naming what was applied already."""
    if plan.restart:
        raise ConfigError(f"cannot change {', '.join(plan.restart)} live; restart the pipeline with the new config")
    changes = p._changes()
    for sid, item in {**plan.replace_sources, **plan.add_sources}.items():
        changes._spec(item, sid if sid in plan.replace_sources else None)
    done: list[str] = []
    steps: list[tuple[str, Any]] = [
        (f"- stream {s}", functools.partial(p.remove_source, s)) for s in plan.remove_sources
    ]
    steps += [(f"~ stream {s}", functools.partial(p.replace_source, s, v)) for s, v in plan.replace_sources.items()]
    steps += [(f"+ stream {s}", functools.partial(p.add_source, v)) for s, v in plan.add_sources.items()]
    steps += [(f"- sink {k}", functools.partial(p.remove_sink, k)) for k in plan.remove_sinks]
    steps += [(f"~ sink {k}", functools.partial(p.replace_sink, k, v)) for k, v in plan.replace_sinks.items()]
    steps += [(f"+ sink {k}", functools.partial(p.add_sink, v, name=k)) for k, v in plan.add_sinks.items()]
    steps += [(f"- analytics {k}", functools.partial(p.remove_analytics, k)) for k in plan.remove_analytics]
    steps += [
        (f"~ analytics {k}", functools.partial(p.replace_analytics, k, v)) for k, v in plan.replace_analytics.items()
    ]
    steps += [
        (f"+ analytics {k}", functools.partial(p.add_analytics, v, name=k, index=i))
        for k, (i, v) in plan.add_analytics.items()
    ]
    for line, step in steps:
        try:
            step()
        except EdgefleetError as exc:
            applied = "; ".join(done) or "nothing"
            raise PipelineError(f"{line.lstrip('-~+ ')}: {exc} (applied before it: {applied})") from exc
        done.append(line)
    return done


def _with_id(spec: SourceSpec, stream_id: str) -> SourceSpec:
    config = spec.config.model_copy(update={"id": stream_id}) if spec.config is not None else None
    return SourceSpec(spec.uri, spec.kind, stream_id, spec.live, spec.queue_size, spec.realtime, spec.loop, config)


def _isolated_failure(stream_id: str, exc: BaseException) -> None:
    """A source added live that fails marks its own stream failed (the runner did) and stops nothing else."""
    _log.warning("stream %s failed and stopped: %s", stream_id, redact(str(exc)) or type(exc).__name__)


def _call_hook(hook: Any, stream_id: str, what: str) -> None:
    try:
        hook(stream_id)
    except Exception as exc:  # a plugin's bookkeeping must not fail the removal
        _log.warning("%s: on_stream_removed(%s) failed: %s", what, stream_id, exc)
