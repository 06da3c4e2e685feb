"""The streaming pipeline: sources → batch + preprocess → inference → decode → analytics → sinks, on
threads with bounded queues between them.

Concurrency model: one thread per source, then the stage threads: ``batch`` and ``infer`` (``_stages``),
and ``post``, the result stage (``_delivery``), which decodes and delivers in formation order. What they
share (the abort flag, the first failure, bounded hand-offs) is a :class:`~edgefleet.sdk._flow.Flow`.
Every queue is bounded; every blocking wait has a timeout and checks the abort flag. The first exception
in any thread aborts the whole pipeline and is re-raised to the caller as :class:`PipelineError` with the
original as its cause.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._analytics import AnalyticsConfig, AnalyticsStage
from ._analytics._runner import AnalyticsRunner
from ._backends import BackendConfig, OnnxRuntimeConfig
from ._batcher import Batcher
from ._config import PipelineConfig
from ._delivery import ResultStage, model_info
from ._errors import ConfigError, EdgefleetError, PipelineError
from ._flow import END, Batch, Flow
from ._frames import FrameQueue, OverflowPolicy, frame_allocator
from ._health import stall_seconds
from ._live import LiveChanges, NamedSinks, apply_plan
from ._metrics import CopyCounter, PipelineStats, StageMetrics, StreamMetrics, StreamStats
from ._model import LoadedModel, ModelSlot, load_model
from ._package import ModelPackage, load_package
from ._results import Result
from ._shadow import ShadowConfig, ShadowGate, ShadowRun, model_labels, one_thread, shadow_config
from ._signing import PublicKey
from ._sinks import CallbackSink, Sink, SinkConfig, SinkContext, build_sink
from ._sinks._paths import check_sink_paths, pipeline_reads
from ._source_watch import watch_first_frames
from ._sources import SOURCES, SourceConfig, SourceSpec, create_source, parse_source
from ._sources._runner import SourceRunner
from ._spec import plan_live_change
from ._stages import BatchStage, InferStage
from ._swap import SwapEvent, Swapper, SwapReport
from ._validation import format_validation_error

__all__ = ["Pipeline"]

_log = logging.getLogger(__name__)
_STAGES = ("queue", "preprocess", "infer", "postprocess", "analytics", "sinks", "end_to_end")


class Pipeline:
    """A running video-analytics pipeline.

    Iterate results::

        from edgefleet.sdk import Pipeline

        with Pipeline("models/nanodet-m", ["models/media/vtest-300.mp4"], max_frames=20) as p:
            for r in p.results():
                print(r.stream_id, r.sequence, [d.label for d in r.detections])

    or pass ``on_result=`` and call :meth:`run`, which blocks until every finite source has ended (or
    :meth:`stop` is called) and returns the final :class:`PipelineStats`.

    Each stream's health is in ``stats().streams[id].state`` (streaming, reconnecting, ... with a
    ``reason``); ``source_timeout_s=30`` fails the run (:class:`~edgefleet.sdk.SourceTimeout` as the cause of
    the :class:`PipelineError`) when no source has delivered a frame 30 s after the start.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | ModelPackage,
        sources: Sequence[str | SourceSpec | SourceConfig | Mapping[str, Any]],
        *,
        device: str = "cpu",
        backend: BackendConfig | Mapping[str, Any] | None = None,
        max_batch: int = 1,
        batch_timeout_ms: float = 10.0,
        sinks: Sequence[Sink | SinkConfig | Mapping[str, Any]] = (),
        analytics: Sequence[AnalyticsStage | AnalyticsConfig | Mapping[str, Any]] = (),
        on_result: Callable[[Result], Any] | None = None,
        score_threshold: float | None = None,
        iou_threshold: float | None = None,
        max_frames: int | None = None,
        source_timeout_s: float = 0.0,
        keep_raw: bool = False,
        infer_workers: int | None = None,
        analytics_thread: bool | None = None,
        analytics_process: bool = False,
        result_queue: int = 256,
        frame_upload: bool = False,
        name: str = "default",
        services: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(sources, (str, SourceSpec, SourceConfig, Mapping)) or not isinstance(sources, Sequence):
            raise ConfigError(f"sources must be a list of sources, got {type(sources).__name__} (wrap one in [...])")
        if isinstance(sinks, (Sink, Mapping, str)) or not isinstance(sinks, Sequence):
            raise ConfigError("sinks must be a list of sinks (JsonlSink(path), {type: jsonl, path: ...}, ...)")
        if isinstance(analytics, (AnalyticsStage, Mapping, str)) or not isinstance(analytics, Sequence):
            raise ConfigError(f"analytics must be a list of stages or configs, got {type(analytics).__name__}")
        if not isinstance(model, (str, os.PathLike, ModelPackage)):
            raise ConfigError(f"model must be a package path or a ModelPackage, got {type(model).__name__}")
        if isinstance(result_queue, bool) or not isinstance(result_queue, int) or result_queue < 1:
            raise ConfigError(f"result_queue must be an integer >= 1 (a bounded queue), got {result_queue!r}")
        self.config = _validate_args(
            model=Path(model.root if isinstance(model, ModelPackage) else model),
            sources=tuple((s.config or s.uri) if isinstance(s, SourceSpec) else s for s in sources),
            device=device,
            backend=backend or OnnxRuntimeConfig(),
            max_batch=max_batch,
            batch_timeout_ms=batch_timeout_ms,
            score_threshold=score_threshold,
            iou_threshold=iou_threshold,
            max_frames=max_frames,
            source_timeout_s=source_timeout_s,
            keep_raw=keep_raw,
            infer_workers=infer_workers,
            frame_upload=frame_upload,
            analytics_thread=analytics_thread,
            analytics_process=analytics_process,
            analytics=tuple(a for a in analytics if not isinstance(a, AnalyticsStage)),
            sinks=tuple(k for k in sinks if not isinstance(k, Sink)),
        )
        cfg_sources = self.config.sources  # validated: mappings are source configs now
        configs = iter(self.config.analytics)  # validated, in the order given, between the app's own stages
        self._analytics = [a if isinstance(a, AnalyticsStage) else next(configs) for a in analytics]
        self._analytics_thread = True  # resolved by start(), once it knows where the stages run
        self._package_arg = model
        self._specs = [_spec(given, item, i) for i, (given, item) in enumerate(zip(sources, cfg_sources, strict=True))]
        ids = [s.stream_id for s in self._specs]
        if len(set(ids)) != len(ids):
            raise EdgefleetError(f"stream ids must be unique, got {ids}")
        self._name, self._services = name, dict(services or {})
        ctx = SinkContext(name, tuple(ids), self._services)
        sink_configs = iter(self.config.sinks)  # validated, in the order given, between the app's own sinks
        self._named_sinks = NamedSinks()
        if on_result is not None:
            self._named_sinks.by_name["callback"] = CallbackSink(on_result)
        for k in sinks:
            if isinstance(k, Sink):
                built, base = k, type(k).__name__
            else:
                config = next(sink_configs)
                built, base = build_sink(config, ctx), config.type
            self._named_sinks.by_name[self._named_sinks.name_for(base)] = built
        # Sinks that draw into the frame run last, after every other sink has seen it.
        self._sinks: list[Sink] = self._named_sinks.ordered()
        self._yield = on_result is None
        self._results: queue.Queue[Any] = queue.Queue(maxsize=result_queue)
        self._device = self.config.device
        self._workers = self.config.infer_workers or _default_workers(self.config)
        self._backend_cfg = _backend_for_workers(self.config, self._workers)
        cfg = self.config  # validated and coerced: "4" is 4 from here on
        self._batch_timeout = cfg.batch_timeout_ms / 1000.0
        self.overrides = {
            k: v
            for k, v in (("score_threshold", cfg.score_threshold), ("iou_threshold", cfg.iou_threshold))
            if v is not None
        }

        self._flow = Flow(name)
        self._cond = threading.Condition()
        self._q_infer: queue.Queue[Any] = queue.Queue(maxsize=2)
        self._q_post: queue.Queue[Any] = queue.Queue(maxsize=2)
        self.copies = CopyCounter()
        self._stages = {name: StageMetrics(name) for name in _STAGES}
        self._streams: dict[str, StreamMetrics] = {}
        self._runners: list[SourceRunner] = []
        self._threads: list[threading.Thread] = []
        self._slot: ModelSlot | None = None
        self._batch: BatchStage | None = None
        self._post: ResultStage | None = None
        self._started: float | None = None
        self._closed_at: float | None = None
        self._state = "created"
        self._swapper = Swapper(self)
        self._live: LiveChanges | None = None

    @classmethod
    def from_config(
        cls,
        config: PipelineConfig,
        *,
        on_result: Callable[[Result], Any] | None = None,
        sinks: Sequence[Sink] = (),
        name: str = "default",
        services: Mapping[str, Any] | None = None,
    ) -> Pipeline:
        """Build a pipeline from a validated :class:`PipelineConfig` (for example a YAML file's): ``sinks``
        come before the config's; ``name`` and ``services`` are what its sinks' factories are told
        (:class:`~edgefleet.sdk._sinks.SinkContext`)."""
        return cls(
            config.model,
            list(config.sources),
            device=config.device,
            backend=config.backend,
            max_batch=config.max_batch,
            batch_timeout_ms=config.batch_timeout_ms,
            sinks=[*sinks, *config.sinks],
            analytics=list(config.analytics),
            on_result=on_result,
            score_threshold=config.score_threshold,
            iou_threshold=config.iou_threshold,
            max_frames=config.max_frames,
            source_timeout_s=config.source_timeout_s,
            keep_raw=config.keep_raw,
            infer_workers=config.infer_workers,
            analytics_thread=config.analytics_thread,
            analytics_process=config.analytics_process,
            frame_upload=config.frame_upload,
            name=name,
            services=services,
        )

    # --- lifecycle ---------------------------------------------------------------------------------
    @property
    def model(self) -> LoadedModel:
        if self._slot is None:
            raise PipelineError("the pipeline has not started")
        return self._slot.current

    @property
    def slot(self) -> ModelSlot:
        if self._slot is None:
            raise PipelineError("the pipeline has not started")
        return self._slot

    @property
    def backend_config(self) -> BackendConfig:
        """The backend config in effect (threads split between inference workers)."""
        return self._backend_cfg

    @property
    def infer_workers(self) -> int:
        return self._workers

    @property
    def specs(self) -> list[SourceSpec]:
        return list(self._specs)

    def start(self) -> Pipeline:
        """Load the model, open the analytics stages and the sinks, and start every thread. Errors in
        loading raise here."""
        if self._state != "created":
            raise PipelineError(f"cannot start a pipeline that is {self._state}")
        # First: on cuda:N it needs the CUDA layer and the device, and says so before anything is loaded
        # or opened (a backend would otherwise warn of a CPU fallback first, and the sinks stay open).
        allocator = frame_allocator(self._device, upload=self.config.frame_upload)
        reads = pipeline_reads(self._specs, self._model_root())
        check_sink_paths(self._sinks, reads, [s.stream_id for s in self._specs])
        self._state = "starting"
        with contextlib.ExitStack() as stack:
            package = (
                self._package_arg if isinstance(self._package_arg, ModelPackage) else load_package(self._package_arg)
            )
            model = load_model(
                package,
                self._backend_cfg,
                device=self._device,
                max_batch=self.config.max_batch,
                overrides=self.overrides,
                copies=self.copies,
                workers=self._workers,
                gpu_filters=not self.config.keep_raw,  # keep_raw: the exact output tensors, not what decoders read
            )
            stack.callback(model.close)
            if self._workers > 1 and not model.backend.concurrent_infer:
                self._workers = 1  # e.g. TensorRT: one execution context, one worker
            self._slot = ModelSlot(model)
            analytics = AnalyticsRunner.build(self._analytics, process=self.config.analytics_process)
            chosen = self.config.analytics_thread
            self._analytics_thread = not analytics.remote if chosen is None else chosen
            analytics.open([s.stream_id for s in self._specs], model_info(model))
            stack.callback(analytics.close)
            for sink in self._sinks:
                sink.stream_fps = self._stream_fps
                sink.open()
                stack.callback(sink.close)
            stack.pop_all()
        _log.info("serving %s with %s, batch %d", model.ref, model.backend.describe(), model.max_batch)
        self._started = time.monotonic()
        self._start_sources(model, allocator)
        flow, hold = self._flow, any(s.needs_pixels for s in self._sinks)
        batcher = Batcher([r.queue for r in self._runners], self._cond, self._batch_timeout, flow.stop_sources)
        self._live = LiveChanges(self, allocator)
        slot, swapper, metrics = self._slot, self._swapper, self._stages
        self._batch = BatchStage(
            flow, slot, batcher, self._q_infer, swapper, metrics, workers=self._workers, hold_pixels=hold
        )
        infer = InferStage(flow, self._q_infer, self._q_post, swapper, slot, self.copies, metrics["infer"])
        self._post = ResultStage(
            flow,
            self._q_post,
            workers=self._workers,
            serving=model,
            slot=self._slot,
            copies=self.copies,
            swapper=self._swapper,
            sinks=self._sinks,
            analytics=analytics,
            streams=self._streams,
            stages=self._stages,
            results=self._results if self._yield else None,
            keep_raw=self.config.keep_raw,
            analytics_thread=self._analytics_thread,
        )
        stages: list[tuple[str, Callable[[], None]]] = [("batch", self._batch.run)]
        stages += [(f"infer{i}" if self._workers > 1 else "infer", infer.run) for i in range(self._workers)]
        stages += self._post.threads
        for name, target in stages:
            t = threading.Thread(target=flow.guard(name, target), name=f"edgefleet-{name}", daemon=True)
            self._threads.append(t)
        self._state = "running"
        for r in self._runners:
            r.start()
        for t in self._threads:
            t.start()
        watch_first_frames(self._flow, lambda: self._streams, self.config.source_timeout_s)
        return self

    def _start_sources(self, model: LoadedModel, allocator: Any) -> None:
        """One runner per source (not started yet), each with its frame pool."""
        hold = any(s.needs_pixels for s in self._sinks)
        for spec in self._specs:
            metrics = StreamMetrics(spec.stream_id, spec.live, stall_seconds(spec))
            metrics.model_ref = model.ref
            self._streams[spec.stream_id] = metrics
            policy = OverflowPolicy.DROP_OLDEST if spec.live else OverflowPolicy.BLOCK
            fq = FrameQueue(spec.queue_size, policy, self._cond)
            # Slots a stream needs beyond its queue: its share of the batches in flight (frames go back to
            # the pool after preprocessing, or after the sinks when they draw on them). Sized by the share,
            # not the whole batch: 64 streams of 1080p would otherwise pin ~15 GB of host memory.
            share = -(-model.max_batch // len(self._specs))
            # (an analytics thread holds up to three batches more: two in its queue, one in hand)
            held = 10 if self._analytics and self._analytics_thread else 7
            in_flight = (share * held if hold else min(share * 2, model.max_batch)) + 1
            runner = SourceRunner(
                create_source(spec),
                fq,
                metrics,
                self.copies,
                self._flow.stop_sources.child(),
                functools.partial(self._flow.fail, f"source {spec.stream_id}"),
                pool_size=spec.queue_size + min(in_flight, 64),
                allocator=allocator,
                max_frames=self.config.max_frames,
                pipeline=self._flow.name,
            )
            self._runners.append(runner)

    def _model_root(self) -> Path:
        return Path(self._package_arg.root if isinstance(self._package_arg, ModelPackage) else self._package_arg)

    def __enter__(self) -> Pipeline:
        return self.start() if self._state == "created" else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        """Stop reading sources; frames already read are still processed and delivered."""
        self._flow.stop_sources.set()

    def abort(self) -> None:
        """Stop now, dropping frames in flight."""
        self._flow.stop_sources.set()
        self._flow.abort.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every result has been delivered; True if done. Re-raises a stage failure."""
        done = self._flow.done.wait(timeout)
        self._flow.raise_if_failed()
        return done

    def run(self) -> PipelineStats:
        """Start if needed and block until every source ended (or :meth:`stop`); returns the stats.
        Re-raises a stage failure as :class:`PipelineError` (after closing)."""
        if self._state == "closed":
            raise PipelineError("this pipeline is closed; make a new one to run again")
        if self._state == "created":
            self.start()
        try:
            if self._yield:
                for _ in self.results():
                    pass
            else:
                while not self._flow.done.wait(0.2):
                    pass
        finally:
            self.close()
        self._flow.raise_if_failed()
        return self.stats()

    def results(self, timeout: float | None = None) -> Iterator[Result]:
        """Yield results as they come, until the end of every stream. ``timeout``: longest wait for one."""
        if not self._yield:
            raise PipelineError("this pipeline delivers results to on_result; results() yields nothing")
        if self._state == "closed":
            raise PipelineError("this pipeline is closed; its results were delivered or dropped at close")
        if self._state == "created":
            self.start()
        flow = self._flow
        deadline = None if timeout is None else time.monotonic() + timeout  # for the next result
        while True:
            try:
                item = self._results.get(timeout=0.1)
            except queue.Empty:
                if flow.abort.is_set() and flow.failed:
                    flow.raise_if_failed()
                if flow.done.is_set() and self._results.empty():
                    flow.raise_if_failed()
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"no result within {timeout} s") from None
                continue
            if item is END:
                flow.raise_if_failed()
                return
            yield item
            if timeout is not None:
                deadline = time.monotonic() + timeout

    def close(self) -> None:
        """Stop everything, join every thread, close sinks and the model. Idempotent."""
        if self._state in ("closed", "created"):
            self._state = "closed"
            return
        flow = self._flow
        flow.stop_sources.set()
        if not flow.done.wait(0.0):
            # Nobody is consuming results: let the post thread finish by draining them.
            deadline = time.monotonic() + 10.0
            while not flow.done.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    self._results.get(timeout=0.05)
            if not flow.done.is_set():
                flow.abort.set()
        for r in self._runners:
            r.join(5.0)
        for t in self._threads:
            t.join(5.0)
        # After a failure, batches can be left between the stages: give back their frames, buffers and
        # model leases, or closing the model waits out its lease timeout (5 s) for them.
        for q in (self._q_infer, self._q_post):
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, Batch):
                    item.discard()
        if self._post is not None:
            self._post.drain()
        for r in self._runners:
            if r.reading_done.is_set():  # its frame memory goes now, not when this object is collected
                r.pool = None
        self._swapper.close()
        if self._slot is not None:
            self._slot.close()
        self._state = "closed"
        self._closed_at = self._closed_at or time.monotonic()

    @property
    def error(self) -> BaseException | None:
        return self._flow.error

    # --- hot swap ----------------------------------------------------------------------------------
    def swap_model(
        self,
        package: str | os.PathLike[str] | ModelPackage,
        *,
        health_window_s: float = 30.0,
        latency_budget_ms: float | None = None,
        warmup_frames: int = 4,
        sample_timeout_s: float = 2.0,
        progress: Callable[[SwapEvent], None] | None = None,
        trusted_keys: Mapping[str, PublicKey] | None = None,
        require_signature: bool = False,
        shadow: ShadowGate | Mapping[str, Any] | None = None,
    ) -> SwapReport:
        """Hot-swap the serving model without dropping a frame (see ``edgefleet.sdk._swap``).

        A package it refuses is never an exception: ``report.ok`` is False, ``report.stage`` says where
        (``verify``: files, hashes, archive or signature; ``load``: the backend or the shapes; ``warmup``,
        ``gate``: outputs, finiteness, latency, golden sample), ``report.error`` why, and the current
        version keeps serving. A path is checked as :func:`load_package` does, with ``trusted_keys`` and
        ``require_signature``. Only misuse raises: a pipeline that is not running
        (:class:`PipelineError`), an argument of the wrong type (``TypeError``) or out of range
        (:class:`ConfigError`). During ``health_window_s`` the previous version stays loaded and a failing
        batch rolls back automatically; :meth:`rollback` does it on demand.

        ``shadow`` (a :class:`ShadowGate` or its mapping) adds a shadow phase after the gate and before the
        cut-over: the new version runs beside the serving one on sampled live frames until enough were
        compared, and agreement below the gate's limits refuses it (stage ``shadow``, the failing KPI in
        ``report.error``, every KPI in ``report.shadow``).

        Example::

            report = pipeline.swap_model("models/nanodet-m-v2")
            print(report.ok, report.old_ref, "->", report.new_ref, report.error)
        """
        if self._state != "running":
            raise PipelineError(f"cannot swap the model of a pipeline that is {self._state}")
        return self._swapper.swap_from(
            package,
            health_window_s=health_window_s,
            latency_budget_ms=latency_budget_ms,
            warmup_frames=warmup_frames,
            sample_timeout_s=sample_timeout_s,
            progress=progress,
            trusted_keys=trusted_keys,
            require_signature=require_signature,
            shadow=shadow,
        )

    def shadow(
        self, package: str | os.PathLike[str] | ModelPackage, config: ShadowConfig | Mapping[str, Any] | None = None
    ) -> ShadowRun:
        """Run ``package`` in shadow beside the serving model on sampled live frames (see
        ``edgefleet.sdk._shadow``); its results reach no sink. Read ``run.agreement()`` any time and end it
        with ``run.stop()`` (which returns the final agreement); closing the pipeline ends it too.

        Example::

            run = pipeline.shadow("models/nanodet-m-v2", {"sample_rate": 0.1})
            time.sleep(30)
            print(run.stop().f1)
        """
        if self._state != "running":
            raise PipelineError(f"cannot run a shadow beside a pipeline that is {self._state}")
        if self._swapper.shadow is not None and self._swapper.shadow.running:
            raise PipelineError(f"{self._swapper.shadow.ref} is in shadow already; stop it first")
        cfg = shadow_config(config)
        package = package if isinstance(package, ModelPackage) else load_package(package)
        backend = self._backend_cfg
        if self._device == "cpu" and isinstance(backend, OnnxRuntimeConfig):
            backend = backend.model_copy(update={"intra_op_threads": 1})  # its own core at most, counted
        model = load_model(
            package,
            backend,
            device=self._device,
            max_batch=1,
            overrides=self.overrides,
            copies=self.copies,
            buffers=2,
            gpu_filters=not self.config.keep_raw,
        )
        run = ShadowRun(
            model,
            model_labels(self.slot.current),
            cfg,
            self.copies,
            close_model=True,
            thread_time=one_thread(backend, self._device),
        )
        self._swapper.shadow = run.start()
        return run

    def rollback(self, reason: str = "requested") -> SwapReport:
        """Return to the previous version while it is still kept (during the health window)."""
        return self._swapper.rollback(reason)

    @property
    def canary(self) -> dict[str, Any] | None:
        """The agreement (``Agreement.to_dict()``) of the last canary shadow (``ShadowGate(phase="after")``),
        judged at the end of its health window; None before one ended."""
        return self._swapper.canary

    @property
    def swap_history(self) -> list[SwapEvent]:
        return list(self._swapper.history)

    # --- live changes (see ``edgefleet.sdk._live``) ---------------------------------------------------
    def _changes(self) -> LiveChanges:
        if self._live is None:
            raise PipelineError(f"cannot change a pipeline that is {self._state}; start it first")
        return self._live

    def add_source(self, source: str | SourceSpec | SourceConfig | Mapping[str, Any]) -> SourceSpec:
        """Add a stream to the running pipeline; the others keep flowing, without a gap. Returns its spec.

        A bad config raises :class:`ConfigError` (or :class:`SourceError`) and changes nothing; a source
        that fails later (a camera that never answers keeps retrying with backoff) shows in its own
        stream's stats and never stops the pipeline. Example::

            spec = pipeline.add_source({"type": "network", "id": "cam7", "url": "rtsp://10.0.0.7/stream"})
        """
        return self._changes().add_source(source)

    def remove_source(self, stream_id: str, *, timeout: float = 10.0) -> StreamStats:
        """Stop one stream; the frames it had queued are still delivered, and this returns (with the
        stream's final stats) once the last of them is, so no result of it comes later."""
        return self._changes().remove_source(stream_id, timeout)

    def replace_source(
        self, stream_id: str, source: str | SourceSpec | SourceConfig | Mapping[str, Any], *, timeout: float = 10.0
    ) -> SourceSpec:
        """Swap the source behind ``stream_id`` (a camera's new URL or credentials): the new one keeps the
        stream id and goes on from the old one's next sequence number. A bad new config leaves the old
        source running."""
        return self._changes().replace_source(stream_id, source, timeout)

    def reconfigure(self, config: PipelineConfig) -> list[str]:
        """Turn the running pipeline into ``config`` with live changes only (sources by stream id, sinks
        and analytics stages by name); returns what was done, one line each. A change of anything else
        (model, device, backend, batch) is a :class:`ConfigError` before anything changes: restart for it.
        Example::

            done = pipeline.reconfigure(load_pipeline_config(Path("pipeline-v2.yaml")))
        """
        plan = plan_live_change(self.config, config.model_copy(update={"model": self.config.model}))
        done = apply_plan(self, plan)
        self.config = config.model_copy(update={"model": self.config.model})
        return done

    @property
    def sink_names(self) -> list[str]:
        """The sinks' names: a config's ``type`` (``#2`` for repeats), an instance's class, ``callback``."""
        return list(self._named_sinks.by_name)

    def add_sink(self, sink: Sink | SinkConfig | Mapping[str, Any], *, name: str | None = None) -> str:
        """Open a sink and put it in place between two batches; returns its name."""
        return self._changes().add_sink(sink, name)

    def remove_sink(self, name: str) -> None:
        """Take a sink out between two batches and close it."""
        self._changes().remove_sink(name)

    def replace_sink(self, name: str, sink: Sink | SinkConfig | Mapping[str, Any]) -> None:
        """Open the new sink, swap it in between two batches, close the old one."""
        self._changes().replace_sink(name, sink)

    @property
    def analytics_names(self) -> list[str]:
        if self._post is None:
            return [type(a).__name__ for a in self._analytics]
        return [n for n, _ in self._post.analytics.stages]

    def add_analytics(
        self,
        stage: AnalyticsStage | AnalyticsConfig | Mapping[str, Any],
        *,
        name: str | None = None,
        index: int | None = None,
    ) -> str:
        """Open an analytics stage and insert it (at ``index``; default last) between two batches."""
        return self._changes().add_analytics(stage, name, index)

    def remove_analytics(self, name: str) -> None:
        """Take an analytics stage out between two batches and close it."""
        self._changes().remove_analytics(name)

    def replace_analytics(self, name: str, stage: AnalyticsStage | AnalyticsConfig | Mapping[str, Any]) -> None:
        """Swap an analytics stage (a zone redrawn) between two batches; the new one starts afresh."""
        self._changes().replace_analytics(name, stage)

    # --- observation -------------------------------------------------------------------------------
    def stats(self) -> PipelineStats:
        """A snapshot of throughput, latency percentiles per stage and stream, drops, copies and the
        analytics stages' counters."""
        post, batch = self._post, self._batch
        finished = (post.finished_at if post is not None else None) or self._closed_at
        now = finished if self._flow.done.is_set() and finished else time.monotonic()
        elapsed = (now - self._started) if self._started else 0.0
        streams = {sid: m.snapshot() for sid, m in list(self._streams.items())}  # a live change adds and removes
        results = sum(s.results for s in streams.values())
        frames_in = sum(s.frames_in for s in streams.values())
        queues = {f"frames:{r.source.stream_id}": len(r.queue) for r in self._runners}
        queues |= {
            "infer": self._q_infer.qsize(),
            "post": self._q_post.qsize(),
            **({"analytics": self._post.handoff.qsize()} if self._post and self._post.handoff else {}),
            "results": self._results.qsize(),
        }
        queues |= {f"pool:{r.source.stream_id}": r.leases for r in self._runners}
        pools = [r.pool for r in self._runners if r.pool is not None]
        frame_memory = {"pools": len(pools), "slots": sum(q.size for q in pools), "bytes": sum(q.nbytes for q in pools)}
        copies = self.copies.snapshot()
        model = self._slot.current.ref if self._slot is not None else None
        batches = batch.batches if batch is not None else 0
        return PipelineStats(
            elapsed_s=elapsed,
            frames_in=frames_in,
            results=results,
            fps=results / elapsed if elapsed > 0 else 0.0,
            dropped=sum(s.dropped for s in streams.values()),
            streams=streams,
            stages={k: v.snapshot() for k, v in list(self._stages.items())},
            queues=queues,
            copies=copies,
            copies_per_frame=(sum(copies["counts"].values()) / frames_in) if frames_in else 0.0,
            batches=batches,
            mean_batch=(batch.frames / batches) if batch is not None and batches else 0.0,
            model=model,
            detections_by_label=dict(post.labels.most_common()) if post is not None else {},
            analytics=post.analytics.stats() if post is not None else {},
            quality=post.quality.snapshot() if post is not None else {},
            frame_memory=frame_memory,
        )

    def source_frame_counts(self) -> dict[str, int | None]:
        """Frames each finite source holds (for progress bars), None for live/unknown."""
        return {r.source.stream_id: r.source.frame_count() for r in self._runners}

    def _stream_fps(self, stream_id: str) -> float | None:
        for r in self._runners:
            if r.source.stream_id == stream_id:
                return r.source.nominal_fps()
        return None


def _default_workers(config: PipelineConfig) -> int:
    """Two single-threaded inference workers beat one two-threaded run for the small models edge
    pipelines use, on ONNX Runtime's CPU path. GPU backends keep one: a second ONNX Runtime lane (session +
    stream) helps throughput-bound detectors but lowered live stream density on an H200 (docs/gpu.md)."""
    if config.device != "cpu" or not isinstance(config.backend, OnnxRuntimeConfig):
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 2 if cores >= 2 else 1


def _backend_for_workers(config: PipelineConfig, workers: int) -> BackendConfig:
    """With several CPU workers, split the cores between them unless the user set the threads (on a GPU
    each worker has its own session whose CPU threads only run shape glue)."""
    backend = config.backend
    on_cpu = config.device == "cpu"
    if on_cpu and workers > 1 and isinstance(backend, OnnxRuntimeConfig) and backend.intra_op_threads is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return backend.model_copy(update={"intra_op_threads": max(1, cores // workers)})
    return backend


def _spec(given: object, validated: str | SourceConfig, index: int) -> SourceSpec:
    if isinstance(given, SourceSpec):
        return given
    return SOURCES.spec(validated, index) if isinstance(validated, SourceConfig) else parse_source(validated, index)


def _validate_args(**kwargs: Any) -> PipelineConfig:
    try:
        return PipelineConfig(**kwargs)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "pipeline")) from None
