"""The streaming pipeline: sources → batcher+preprocess → inference → decode+sinks, on threads with
bounded queues between them.

Concurrency model: one thread per source, then three stage threads (``batch``, ``infer``, ``post``).
``post`` decodes and delivers in formation order. (Decoding on several threads was measured on an H200
and did not help: the decoders' numpy work is bound by the GIL; docs/gpu.md.)
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
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._backends import InputBuffer
from ._batcher import Batcher
from ._config import OnnxRuntimeConfig, PipelineConfig, SinkConfig, TensorRTConfig
from ._decoders import Decoded
from ._errors import ConfigError, EdgefleetError, PipelineError
from ._frames import Frame, FrameQueue, OverflowPolicy, frame_allocator
from ._manifest import format_validation_error
from ._metrics import CopyCounter, PipelineStats, StageMetrics, StreamMetrics
from ._model import LoadedModel, ModelLease, ModelSlot, load_model
from ._package import ModelPackage, load_package
from ._preprocess import Transform
from ._redact import redact
from ._results import Result
from ._signing import PublicKey
from ._sinks import CallbackSink, JsonlSink, Sink, VideoSink
from ._sinks._paths import check_sink_paths, pipeline_reads
from ._sources import SourceSpec, create_source, parse_source
from ._sources._runner import SourceRunner
from ._swap import SwapEvent, Swapper, SwapReport

__all__ = ["Pipeline"]

_log = logging.getLogger(__name__)
_END = object()
_STAGES = ("queue", "preprocess", "infer", "postprocess", "sinks", "end_to_end")


@dataclass
class _Batch:
    frames: list[Frame]
    lease: ModelLease
    buffer: InputBuffer | None
    transforms: list[Transform]
    formed: float
    index: int  # formation order; results leave in this order whatever order workers finish in
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> LoadedModel:
        return self.lease.model


class Pipeline:
    """A running video-analytics pipeline.

    Iterate results::

        from edgefleet.sdk import Pipeline

        with Pipeline("models/nanodet-m", ["models/media/vtest-300.mp4"], max_frames=20) as p:
            for r in p.results():
                print(r.stream_id, r.sequence, [d.label for d in r.detections])

    or pass ``on_result=`` and call :meth:`run`, which blocks until every finite source has ended (or
    :meth:`stop` is called) and returns the final :class:`PipelineStats`.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | ModelPackage,
        sources: Sequence[str | SourceSpec],
        *,
        device: str = "cpu",
        backend: OnnxRuntimeConfig | TensorRTConfig | None = None,
        max_batch: int = 1,
        batch_timeout_ms: float = 10.0,
        sinks: Sequence[Sink] = (),
        on_result: Callable[[Result], Any] | None = None,
        score_threshold: float | None = None,
        iou_threshold: float | None = None,
        max_frames: int | None = None,
        keep_raw: bool = False,
        infer_workers: int | None = None,
        result_queue: int = 256,
        frame_upload: bool = False,
    ) -> None:
        if isinstance(sources, (str, SourceSpec)) or not isinstance(sources, Sequence):
            raise ConfigError(f"sources must be a list of sources, got {type(sources).__name__} (wrap one in [...])")
        if isinstance(sinks, Sink) or not isinstance(sinks, Sequence) or not all(isinstance(k, Sink) for k in sinks):
            raise ConfigError("sinks must be a list of Sink objects (JsonlSink(path), VideoSink(path), ...)")
        if not isinstance(model, (str, os.PathLike, ModelPackage)):
            raise ConfigError(f"model must be a package path or a ModelPackage, got {type(model).__name__}")
        if isinstance(result_queue, bool) or not isinstance(result_queue, int) or result_queue < 1:
            raise ConfigError(f"result_queue must be an integer >= 1 (a bounded queue), got {result_queue!r}")
        self.config = _validate_args(
            model=Path(model.root if isinstance(model, ModelPackage) else model),
            sources=tuple(s if isinstance(s, str) else s.uri for s in sources),
            device=device,
            backend=backend or OnnxRuntimeConfig(),
            max_batch=max_batch,
            batch_timeout_ms=batch_timeout_ms,
            score_threshold=score_threshold,
            iou_threshold=iou_threshold,
            max_frames=max_frames,
            keep_raw=keep_raw,
            infer_workers=infer_workers,
            frame_upload=frame_upload,
        )
        self._package_arg = model
        self._specs = [s if isinstance(s, SourceSpec) else parse_source(s, i) for i, s in enumerate(sources)]
        ids = [s.stream_id for s in self._specs]
        if len(set(ids)) != len(ids):
            raise EdgefleetError(f"stream ids must be unique, got {ids}")
        self._sinks: list[Sink] = list(sinks)
        if on_result is not None:
            self._sinks.insert(0, CallbackSink(on_result))
        # Sinks that draw into the frame run last, after every other sink has seen it.
        self._sinks.sort(key=lambda s: s.needs_pixels)
        self._yield = on_result is None
        self._results: queue.Queue[Any] = queue.Queue(maxsize=result_queue)
        self._device = self.config.device
        self._workers = self.config.infer_workers or _default_workers(self.config)
        self._backend_cfg = _backend_for_workers(self.config, self._workers)
        cfg = self.config  # validated and coerced: "4" is 4 from here on
        self._max_batch = cfg.max_batch
        self._batch_timeout = cfg.batch_timeout_ms / 1000.0
        self.overrides = {
            k: v
            for k, v in (("score_threshold", cfg.score_threshold), ("iou_threshold", cfg.iou_threshold))
            if v is not None
        }
        self._max_frames = cfg.max_frames
        self._keep_raw = cfg.keep_raw
        self._hold_pixels = any(s.needs_pixels for s in self._sinks)

        self._stop_sources = threading.Event()
        self._abort = threading.Event()
        self._done = threading.Event()
        self._error: tuple[str, BaseException] | None = None
        self._error_lock = threading.Lock()
        self._cond = threading.Condition()
        self._q_infer: queue.Queue[Any] = queue.Queue(maxsize=2)
        self._q_post: queue.Queue[Any] = queue.Queue(maxsize=2)
        self.copies = CopyCounter()
        self._stages = {name: StageMetrics(name) for name in _STAGES}
        self._streams: dict[str, StreamMetrics] = {}
        self._runners: list[SourceRunner] = []
        self._threads: list[threading.Thread] = []
        self._slot: ModelSlot | None = None
        self._labels: Counter[str] = Counter()
        self._batches = 0
        self._batched_frames = 0
        self._started: float | None = None
        self._finished_at: float | None = None
        self._state = "created"
        self._swapper = Swapper(self)

    @classmethod
    def from_config(
        cls,
        config: PipelineConfig,
        *,
        on_result: Callable[[Result], Any] | None = None,
        sinks: Sequence[Sink] = (),
    ) -> Pipeline:
        """Build a pipeline from a validated :class:`PipelineConfig` (for example a YAML file's)."""
        built: list[Sink] = list(sinks) + [_sink_from_config(s, len(config.sources) > 1) for s in config.sinks]
        return cls(
            config.model,
            list(config.sources),
            device=config.device,
            backend=config.backend,
            max_batch=config.max_batch,
            batch_timeout_ms=config.batch_timeout_ms,
            sinks=built,
            on_result=on_result,
            score_threshold=config.score_threshold,
            iou_threshold=config.iou_threshold,
            max_frames=config.max_frames,
            keep_raw=config.keep_raw,
            infer_workers=config.infer_workers,
            frame_upload=config.frame_upload,
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
    def backend_config(self) -> OnnxRuntimeConfig | TensorRTConfig:
        """The backend config in effect (threads split between inference workers)."""
        return self._backend_cfg

    @property
    def infer_workers(self) -> int:
        return self._workers

    @property
    def specs(self) -> list[SourceSpec]:
        return list(self._specs)

    def start(self) -> Pipeline:
        """Load the model, open the sinks and start every thread. Errors in loading raise here."""
        if self._state != "created":
            raise PipelineError(f"cannot start a pipeline that is {self._state}")
        # First: on cuda:N it needs the CUDA layer and the device, and says so before anything is loaded
        # or opened (a backend would otherwise warn of a CPU fallback first, and the sinks stay open).
        allocator = frame_allocator(self._device, upload=self.config.frame_upload)
        model_root = self._package_arg.root if isinstance(self._package_arg, ModelPackage) else self._package_arg
        check_sink_paths(self._sinks, pipeline_reads(self._specs, Path(model_root)), [s.stream_id for s in self._specs])
        self._state = "starting"
        with contextlib.ExitStack() as stack:
            package = (
                self._package_arg if isinstance(self._package_arg, ModelPackage) else load_package(self._package_arg)
            )
            model = load_model(
                package,
                self._backend_cfg,
                device=self._device,
                max_batch=self._max_batch,
                overrides=self.overrides,
                copies=self.copies,
                workers=self._workers,
                gpu_filters=not self._keep_raw,  # keep_raw: the exact output tensors, not what decoders read
            )
            stack.callback(model.close)
            if self._workers > 1 and not model.backend.concurrent_infer:
                self._workers = 1  # e.g. TensorRT: one execution context, one worker
            self._slot = ModelSlot(model)
            for sink in self._sinks:
                sink.stream_fps = self._stream_fps
                sink.open()
                stack.callback(sink.close)
            stack.pop_all()
        _log.info("serving %s with %s, batch %d", model.ref, model.backend.describe(), model.max_batch)
        self._started = time.monotonic()
        hold = self._hold_pixels
        for spec in self._specs:
            metrics = StreamMetrics(spec.stream_id, spec.live)
            metrics.model_ref = model.ref
            self._streams[spec.stream_id] = metrics
            policy = OverflowPolicy.DROP_OLDEST if spec.live else OverflowPolicy.BLOCK
            fq = FrameQueue(spec.queue_size, policy, self._cond)
            # Slots a stream needs beyond its queue: its share of the batches in flight (frames go back to
            # the pool after preprocessing, or after the sinks when they draw on them). Sized by the share,
            # not the whole batch: 64 streams of 1080p would otherwise pin ~15 GB of host memory.
            share = -(-model.max_batch // len(self._specs))
            in_flight = (share * 7 if hold else min(share * 2, model.max_batch)) + 1
            runner = SourceRunner(
                create_source(spec),
                fq,
                metrics,
                self.copies,
                self._stop_sources,
                functools.partial(self._fail, f"source {spec.stream_id}"),
                pool_size=spec.queue_size + min(in_flight, 64),
                allocator=allocator,
                max_frames=self._max_frames,
            )
            self._runners.append(runner)
        self._batcher = Batcher([r.queue for r in self._runners], self._cond, self._batch_timeout)
        stages = [("batch", self._batch_loop)]
        stages += [(f"infer{i}" if self._workers > 1 else "infer", self._infer_loop) for i in range(self._workers)]
        stages.append(("post", self._post_loop))
        for name, target in stages:
            t = threading.Thread(target=self._guard(name, target), name=f"edgefleet-{name}", daemon=True)
            self._threads.append(t)
        self._state = "running"
        for r in self._runners:
            r.start()
        for t in self._threads:
            t.start()
        return self

    def __enter__(self) -> Pipeline:
        return self.start() if self._state == "created" else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        """Stop reading sources; frames already read are still processed and delivered."""
        self._stop_sources.set()

    def abort(self) -> None:
        """Stop now, dropping frames in flight."""
        self._stop_sources.set()
        self._abort.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every result has been delivered; True if done. Re-raises a stage failure."""
        done = self._done.wait(timeout)
        self._raise_if_failed()
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
                while not self._done.wait(0.2):
                    pass
        finally:
            self.close()
        self._raise_if_failed()
        return self.stats()

    def results(self, timeout: float | None = None) -> Iterator[Result]:
        """Yield results as they come, until the end of every stream. ``timeout``: longest wait for one."""
        if not self._yield:
            raise PipelineError("this pipeline delivers results to on_result; results() yields nothing")
        if self._state == "closed":
            raise PipelineError("this pipeline is closed; its results were delivered or dropped at close")
        if self._state == "created":
            self.start()
        while True:
            try:
                item = self._results.get(timeout=0.1)
            except queue.Empty:
                if self._abort.is_set() and self._error is not None:
                    self._raise_if_failed()
                if self._done.is_set() and self._results.empty():
                    self._raise_if_failed()
                    return
                if timeout is not None:
                    timeout -= 0.1
                    if timeout <= 0:
                        raise TimeoutError("no result within the timeout") from None
                continue
            if item is _END:
                self._raise_if_failed()
                return
            yield item

    def close(self) -> None:
        """Stop everything, join every thread, close sinks and the model. Idempotent."""
        if self._state in ("closed", "created"):
            self._state = "closed"
            return
        self._stop_sources.set()
        if not self._done.wait(0.0):
            # Nobody is consuming results: let the post thread finish by draining them.
            deadline = time.monotonic() + 10.0
            while not self._done.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    self._results.get(timeout=0.05)
            if not self._done.is_set():
                self._abort.set()
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
                if isinstance(item, _Batch):
                    self._discard(item)
        self._swapper.close()
        if self._slot is not None:
            self._slot.close()
        self._state = "closed"
        self._finished_at = self._finished_at or time.monotonic()

    # --- failure handling --------------------------------------------------------------------------
    def _fail(self, stage: str, exc: BaseException) -> None:
        with self._error_lock:
            if self._error is None:
                self._error = (stage, exc)
                _log.error("%s failed: %s", stage, redact(str(exc)) or type(exc).__name__)
        self._stop_sources.set()
        self._abort.set()
        self._done.set()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            stage, exc = self._error
            msg = redact(str(exc)) or type(exc).__name__
            raise PipelineError(f"{stage}: {msg}", stage=stage) from exc

    @property
    def error(self) -> BaseException | None:
        return self._error[1] if self._error else None

    def _guard(self, name: str, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:
                self._fail(name, exc)

        return run

    def _put(self, q: queue.Queue[Any], item: Any) -> bool:
        while not self._abort.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, q: queue.Queue[Any]) -> Any:
        while not self._abort.is_set():
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue
        return _END

    # --- stages ------------------------------------------------------------------------------------
    def _batch_loop(self) -> None:
        slot = self.slot
        try:
            while True:
                # Lease first: the batch is bound to the model serving now, and its size limit with it.
                lease = slot.lease()
                frames = self._batcher.next_batch(lease.model.max_batch, self._abort)
                if frames is None:
                    lease.release()
                    return
                batch = self._form(frames, lease)
                if batch is None:
                    return
                if not self._put(self._q_infer, batch):
                    self._discard(batch)
                    return
        finally:
            for _ in range(self._workers):
                self._put(self._q_infer, _END)

    def _form(self, frames: list[Frame], lease: ModelLease) -> _Batch | None:
        model = lease.model
        buffer = None
        while buffer is None:
            if self._abort.is_set():
                lease.release()
                for f in frames:
                    f.release()
                return None
            buffer = model.acquire_buffer(0.1)
        formed = time.monotonic()
        batch = _Batch(frames, lease, buffer, [], formed, self._batches)
        queue_stage = self._stages["queue"]
        for f in frames:
            queue_stage.record(formed - f.captured)
            if self._swapper.sampling:
                self._swapper.offer_sample(f.image)
        t0 = time.perf_counter()
        try:
            for i, f in enumerate(frames):
                batch.transforms.append(model.preprocess(f.image, buffer, i))
            model.preprocess.finish(buffer, len(frames))
        except BaseException:
            self._discard(batch)
            raise
        self._stages["preprocess"].record(time.perf_counter() - t0, len(frames))
        if not (self._hold_pixels or self._swapper.holding_pixels()):
            for f in frames:
                f.release()  # pixels are in the input buffer now; the slot can take the next frame
        self._batches += 1
        self._batched_frames += len(frames)
        return batch

    def _discard(self, batch: _Batch) -> None:
        for f in batch.frames:
            f.release()
        if batch.buffer is not None:
            batch.model.release_buffer(batch.buffer)
            batch.buffer = None
        batch.lease.release()

    def _infer_loop(self) -> None:
        try:
            while True:
                batch = self._get(self._q_infer)
                if batch is _END:
                    return
                t0 = time.perf_counter()
                failure: str | None = "rolled back" if self._swapper.rejected(batch.model) else None
                try:
                    if failure is None:
                        batch.outputs = batch.model.backend.infer(batch.buffer, len(batch.frames))
                except Exception as exc:
                    if not self._swapper.watching(batch.model):
                        self._discard(batch)
                        raise
                    failure = self._swapper.fail(batch.model, f"inference failed: {exc}")
                finally:
                    if batch.buffer is not None:
                        batch.model.release_buffer(batch.buffer)
                        batch.buffer = None
                elapsed = time.perf_counter() - t0
                if failure is None and self._swapper.watching(batch.model):
                    failure = self._swapper.check_batch(batch.model, batch.outputs, elapsed * 1000.0)
                if failure is not None and not self._reprocess(batch):
                    self._discard(batch)
                    return
                self._stages["infer"].record(elapsed, len(batch.frames))
                if not self._put(self._q_post, batch):
                    self._discard(batch)
                    return
        finally:
            self._put(self._q_post, _END)

    def _decode(self, batch: _Batch) -> list[Decoded] | None:
        """Decode the batch (post thread). A model in its health window whose decoder fails is rolled
        back like one whose inference fails, and the batch re-run with the version serving then.
        None: the pipeline is aborting."""
        t0 = time.perf_counter()
        try:
            decoded = batch.model.decoder.decode(batch.outputs, batch.transforms)
        except Exception as exc:
            if not self._swapper.watching(batch.model):
                self._fail("decode", exc)  # reported as the decode stage, with the decoder's error
                return None
            self._swapper.fail(batch.model, f"decoding failed: {exc}")
            if not self._reprocess(batch):
                return None
            decoded = batch.model.decoder.decode(batch.outputs, batch.transforms)
        self._stages["postprocess"].record(time.perf_counter() - t0, len(batch.frames))
        return decoded

    def _reprocess(self, batch: _Batch) -> bool:
        """Re-run a batch the new model failed on with the version now serving (after the rollback),
        so its frames still get exactly one result each. Runs on an inference worker, or on the post
        thread when the new model's decoder failed."""
        from ._preprocess import make_preprocessor

        lease = self.slot.lease()
        model = lease.model
        buffer = None
        while buffer is None:
            if self._abort.is_set():
                lease.release()
                return False
            buffer = model.acquire_buffer(0.1)
        try:
            # A private preprocessor: the batch thread is using the serving model's own at the same time.
            pre = make_preprocessor(model.package.manifest.input, buffer.device, self.copies)
            batch.transforms = [pre(f.image, buffer, i) for i, f in enumerate(batch.frames)]
            pre.finish(buffer, len(batch.frames))
            batch.outputs = model.backend.infer(buffer, len(batch.frames))
        finally:
            model.release_buffer(buffer)
        batch.lease.release()
        batch.lease = lease
        return True

    def _post_loop(self) -> None:
        pending: dict[int, _Batch] = {}  # batches that finished before an earlier one
        next_index = 0
        ends = 0
        failure: BaseException | None = None
        try:
            while ends < self._workers:
                batch = self._get(self._q_post)
                if batch is _END:
                    if self._abort.is_set():
                        return
                    ends += 1
                    continue
                pending[batch.index] = batch
                while next_index in pending:
                    ready = pending.pop(next_index)
                    next_index += 1
                    try:
                        self._deliver(ready)
                    finally:
                        self._discard(ready)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            for batch in pending.values():
                self._discard(batch)
            self._finished_at = time.monotonic()
            for sink in self._sinks:
                try:
                    sink.close()
                except Exception as exc:
                    if failure is None:  # else the error that stopped delivery is the one to report
                        self._fail("sink close", exc)
                    else:
                        _log.debug("closing a sink after %r: %s", failure, exc)
            if self._yield and not self._abort.is_set():
                self._put(self._results, _END)
            self._done.set()

    def _deliver(self, batch: _Batch) -> None:
        decoded = self._decode(batch)
        if decoded is None:
            return
        model = batch.model
        t1 = time.perf_counter()
        for i, (frame, d) in enumerate(zip(batch.frames, decoded, strict=True)):
            now = time.monotonic()
            latency = (now - frame.captured) * 1000.0
            raw = d.raw
            if self._keep_raw and raw is None:
                raw = {k: v[i] for k, v in batch.outputs.items()}
            result = Result(
                frame.stream_id,
                frame.sequence,
                frame.timestamp,
                model.name,
                model.version,
                frame.width,
                frame.height,
                latency,
                d.detections,
                d.classifications,
                raw,
            )
            for det in d.detections:
                self._labels[det.label] += 1
            for sink in self._sinks:
                sink.write(result, frame)
            stream = self._streams[frame.stream_id]
            stream.results.add()
            stream.latency.add(latency)
            stream.model_ref = model.ref
            self._stages["end_to_end"].record(now - frame.captured)
            if self._yield and not self._put(self._results, result):
                return
        self._stages["sinks"].record(time.perf_counter() - t1, len(batch.frames))

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
        )

    def rollback(self, reason: str = "requested") -> SwapReport:
        """Return to the previous version while it is still kept (during the health window)."""
        return self._swapper.rollback(reason)

    @property
    def swap_history(self) -> list[SwapEvent]:
        return list(self._swapper.history)

    # --- observation -------------------------------------------------------------------------------
    def stats(self) -> PipelineStats:
        """A snapshot of throughput, latency percentiles per stage and stream, drops and copies."""
        now = self._finished_at if self._done.is_set() and self._finished_at else time.monotonic()
        elapsed = (now - self._started) if self._started else 0.0
        streams = {sid: m.snapshot() for sid, m in self._streams.items()}
        results = sum(s.results for s in streams.values())
        frames_in = sum(s.frames_in for s in streams.values())
        queues = {f"frames:{r.source.stream_id}": len(r.queue) for r in self._runners}
        queues |= {
            "infer": self._q_infer.qsize(),
            "post": self._q_post.qsize(),
            "results": self._results.qsize(),
        }
        queues |= {f"pool:{r.source.stream_id}": (r.pool.leases if r.pool else 0) for r in self._runners}
        copies = self.copies.snapshot()
        model = self._slot.current.ref if self._slot is not None else None
        return PipelineStats(
            elapsed_s=elapsed,
            frames_in=frames_in,
            results=results,
            fps=results / elapsed if elapsed > 0 else 0.0,
            dropped=sum(s.dropped for s in streams.values()),
            streams=streams,
            stages={k: v.snapshot() for k, v in self._stages.items()},
            queues=queues,
            copies=copies,
            copies_per_frame=(sum(copies["counts"].values()) / frames_in) if frames_in else 0.0,
            batches=self._batches,
            mean_batch=(self._batched_frames / self._batches) if self._batches else 0.0,
            model=model,
            detections_by_label=dict(self._labels.most_common()),
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


def _backend_for_workers(config: PipelineConfig, workers: int) -> OnnxRuntimeConfig | TensorRTConfig:
    """With several CPU workers, split the cores between them unless the user set the threads (on a GPU
    each worker has its own session whose CPU threads only run shape glue)."""
    backend = config.backend
    on_cpu = config.device == "cpu"
    if on_cpu and workers > 1 and isinstance(backend, OnnxRuntimeConfig) and backend.intra_op_threads is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return backend.model_copy(update={"intra_op_threads": max(1, cores // workers)})
    return backend


def _validate_args(**kwargs: Any) -> PipelineConfig:
    try:
        return PipelineConfig(**kwargs)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "pipeline")) from None


def _sink_from_config(cfg: SinkConfig, multi_stream: bool) -> Sink:
    if cfg.type == "jsonl":
        return JsonlSink(cfg.path)
    return VideoSink(cfg.path, multi_stream=multi_stream)
