"""The pipeline's result stage: batches back in formation order → decode → :class:`Result` records →
analytics stages → sinks and ``results()``.

Decoding runs a whole batch at a time (decoding on several threads was measured on an H200 and did not
help: the decoders' numpy work is bound by the GIL; docs/gpu.md). A model in its health window whose
decoder fails is rolled back like one whose inference fails, and the batch is re-run on the version
serving then. Analytics stages see each batch's results after that, and hear of every change of the
serving version before its first result reaches them.

Threads: without analytics stages one thread (``edgefleet-post``) does it all. With them (and
``analytics_thread``, the default) decoding has its own thread (``edgefleet-decode``) and hands each
batch's results on through a bounded queue (two batches; it waits when that is full) to
``edgefleet-post``, the result thread, which runs the analytics stages and the sinks: the analytics of
one batch overlap the decoding of the next, and the inference workers are never held up waiting for the
result thread to decode. Order is kept: one thread each, a FIFO between them. When the result thread
falls behind, it takes every decoded batch waiting for it (up to ``MERGE_FRAMES`` frames, never across a
change of the serving version) through the analytics stages in one call: a vectorised stage's cost is
mostly per call, so a busy pipeline pays it once for several batches instead of falling further behind.

When every analytics stage runs in the analytics process (``analytics_process``, ``analytics_thread``
unset) there is no decode thread: ``edgefleet-post`` decodes, sends the batch to the process and, when
the next batch comes before the answer, decodes that one before taking the answer (``_run_inline``), so
the process's work overlaps the decoding with one Python thread fewer contending for the GIL (docs/gpu.md).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._analytics import ModelChange
from ._analytics._runner import AnalyticsRunner, ModelInfo, Pending
from ._decoders import BatchColumns, Decoded
from ._detections import label_counts
from ._errors import PipelineError
from ._flow import END, Batch, Flow
from ._metrics import CopyCounter, StageMetrics, StreamMetrics
from ._model import LoadedModel, ModelSlot
from ._quality import QualityMeter
from ._results import Result, new_result
from ._sinks import Sink
from ._stages import rerun
from ._swap import Swapper

__all__ = ["ResultStage", "model_info", "next_batch_first"]

_log = logging.getLogger(__name__)
#: the most frames the result thread hands to the analytics stages in one call, when batches wait for it
MERGE_FRAMES = 256
#: how long the result thread waits on the analytics process's socket between looks at its inbox
POLL_S = 0.0005


def next_batch_first(ready: Callable[[float], bool], inbox: queue.Queue[Any], abort: threading.Event) -> bool:
    """Wait for an analytics answer (``ready(timeout)``: the process's socket polled off the GIL) or the
    next batch in ``inbox``, whichever comes first. True: the next batch came first (or was waiting
    already: it is looked at before the socket, a system call fewer), or the pipeline is aborting, to be
    decoded while the process works; False: the answer came first, to deliver at once."""
    while inbox.empty() and not abort.is_set():
        if ready(POLL_S):
            return False
    return True


def model_info(model: LoadedModel) -> ModelInfo:
    return (model.name, model.version, tuple(model.package.labels))


@dataclass
class _Decoded:
    """A batch decoded into its results, on its way to the analytics stages and the sinks."""

    batch: Batch
    results: list[Result]
    change: ModelChange | None  # the serving version changed just before this batch
    columns: BatchColumns | None = None  # the decoder's, when the results' detections are views of them


@dataclass
class _Analysing:
    """Results on their way through the analytics stages: :meth:`take` gives them analysed and records
    the stage's time (the thread's own: starting plus taking, not the analytics process's work)."""

    pending: Pending
    metrics: StageMetrics | None
    spent: float

    def take(self) -> list[Result]:
        t0 = time.perf_counter()
        results = self.pending.take()
        if self.metrics is not None:
            self.metrics.record(self.spent + time.perf_counter() - t0, len(results))
        return results


class ResultStage:
    """Delivers every frame's result exactly once, in formation order (one thread, or two: see the module)."""

    def __init__(
        self,
        flow: Flow,
        inbox: queue.Queue[Any],
        *,
        workers: int,
        serving: LoadedModel,
        slot: ModelSlot,
        copies: CopyCounter,
        swapper: Swapper,
        sinks: Sequence[Sink],
        analytics: AnalyticsRunner,
        streams: dict[str, StreamMetrics],
        stages: dict[str, StageMetrics],
        results: queue.Queue[Any] | None,
        keep_raw: bool,
        analytics_thread: bool = True,
    ) -> None:
        self.flow, self.inbox, self.workers = flow, inbox, workers
        self.slot, self.copies, self.swapper = slot, copies, swapper
        self.sinks, self.analytics = list(sinks), analytics
        self.streams, self.stages = streams, stages
        self.results = results  # None: results go to the sinks only (a callback pipeline)
        self.keep_raw = keep_raw
        self.labels: Counter[str] = Counter()
        self.quality = QualityMeter()  # per-version KPIs of what was delivered
        self.finished_at: float | None = None
        #: batches whose analytics answer was taken after the next batch was decoded (``_run_inline``)
        self.overlapped = 0
        self._serving = serving  # the version of the last batch decoded (the analytics opened on it)
        # decode thread → result thread, when analytics stages run on a thread of their own
        self.handoff: queue.Queue[Any] | None = queue.Queue(maxsize=2) if analytics and analytics_thread else None
        #: held while a batch goes through the analytics and the sinks: live changes swap sinks and
        #: analytics stages between batches (decoding does not need it)
        self.lock = threading.Lock()

    @property
    def threads(self) -> list[tuple[str, Any]]:
        """(name, target) of the threads this stage runs."""
        if self.handoff is None:
            return [("post", self.run)]
        return [("decode", self.run_decode), ("post", self.run)]

    def _in_order(self) -> Generator[Batch, None, None]:
        """The inbox's batches in formation order (what remains unordered at the end is discarded)."""
        pending: dict[int, Batch] = {}  # batches that finished before an earlier one
        next_index = 0
        ends = 0
        flow = self.flow
        try:
            while ends < self.workers:
                batch = flow.get(self.inbox)
                if batch is END:
                    if flow.abort.is_set():
                        return
                    ends += 1
                    continue
                pending[batch.index] = batch
                while next_index in pending:
                    ready = pending.pop(next_index)
                    next_index += 1
                    yield ready
        finally:
            for batch in pending.values():
                batch.discard()

    def _decoded(self) -> Generator[tuple[Batch, _Decoded | None], None, None]:
        """The inbox's batches in formation order, each with its results (None: the pipeline is aborting);
        a batch whose decoding raised is given back before the error goes on."""
        with contextlib.closing(self._in_order()) as batches:
            for ready in batches:
                try:
                    item = self.prepare(ready)
                except BaseException:
                    ready.discard()
                    raise
                yield ready, item

    def run_decode(self) -> None:
        """The decode thread (with an analytics thread): decode in order, hand on to the result thread."""
        flow, handoff = self.flow, self.handoff
        if handoff is None:
            raise PipelineError("the decode thread runs only beside an analytics thread")
        try:
            with contextlib.closing(self._decoded()) as decoded:
                for ready, item in decoded:
                    if item is None or not flow.put(handoff, item):
                        ready.discard()
                        if item is not None:
                            return
        finally:
            flow.put(handoff, END)

    def drain(self) -> None:
        """Give back the batches left in the hand-off queue (after an abort)."""
        while self.handoff is not None:
            try:
                item = self.handoff.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Decoded):
                item.batch.discard()

    def run(self) -> None:
        """The result thread: decoded batches (its own decoding, or the decode thread's) → analytics →
        sinks, in formation order; closes the analytics stages and the sinks at the end."""
        failure: BaseException | None = None
        flow = self.flow
        try:
            if self.handoff is None:
                self._run_inline()
            else:
                carry: _Decoded | None = None
                while True:
                    item = carry if carry is not None else flow.get(self.handoff)
                    if item is END:
                        break
                    group, carry = self._gather(item)
                    try:
                        with self.lock:
                            self.finish(group)
                    finally:
                        for done in group:
                            done.batch.discard()
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self.drain()
            self.finished_at = time.monotonic()
            self._close(failure)
            if self.results is not None and not flow.abort.is_set():
                flow.put(self.results, END)
            flow.done.set()

    def _run_inline(self) -> None:
        """The result thread without an analytics thread: decode, analyse and deliver batch by batch. Where
        every analytics stage runs in the analytics process, a batch sent there is delivered as soon as its
        answer comes, unless the next batch comes first: then that one is decoded while the process works
        and the answer is taken after (:func:`next_batch_first`). So a busy pipeline's result thread
        never waits for the process with a batch to decode, and a light one adds no latency."""
        sent: tuple[_Decoded, _Analysing] | None = None
        try:
            with contextlib.closing(self._decoded()) as decoded:
                for ready, item in decoded:
                    if sent is not None:
                        done, sent = sent, None
                        self._complete(*done)
                    if item is None:  # aborting
                        ready.discard()
                        continue
                    with self.lock:
                        sent = item, self._start(item, item.results)
                    if self.analytics.remote and next_batch_first(sent[1].pending.ready, self.inbox, self.flow.abort):
                        self.overlapped += 1
                    else:
                        done, sent = sent, None
                        self._complete(*done)
            if sent is not None:  # the last batch
                done, sent = sent, None
                self._complete(*done)
        finally:
            if sent is not None:  # failed with a batch in flight
                sent[0].batch.discard()

    def _complete(self, item: _Decoded, analysing: _Analysing) -> None:
        """Take a started batch's analysed results and deliver them."""
        try:
            with self.lock:
                self._deliver(item, analysing.take())
        finally:
            item.batch.discard()

    def _close(self, failure: BaseException | None) -> None:
        """Close the analytics stages, then the sinks; a close failure fails the run unless an earlier
        error already stopped delivery (that one is the one to report)."""
        for name, close in (("analytics close", self.analytics.close), *(("sink close", s.close) for s in self.sinks)):
            try:
                close()
            except Exception as exc:
                if failure is None:
                    self.flow.fail(name, exc)
                else:
                    _log.debug("%s after %r: %s", name, failure, exc)

    def decode(self, batch: Batch) -> list[Decoded] | None:
        """Decode the batch. None: the pipeline is aborting."""
        t0 = time.perf_counter()
        try:
            decoded = batch.model.decoder.decode(batch.outputs, batch.transforms)
        except Exception as exc:
            if self.swapper.rejected(batch.model):
                pass  # an earlier batch of it rolled it back already: this one, still bound to it, re-runs too
            elif not self.swapper.watching(batch.model):
                self.flow.fail("decode", exc)  # reported as the decode stage, with the decoder's error
                return None
            else:
                self.swapper.fail(batch.model, f"decoding failed: {exc}")
            if not rerun(batch, self.slot, self.copies, self.flow.abort):
                return None
            decoded = batch.model.decoder.decode(batch.outputs, batch.transforms)
        self.stages["postprocess"].record(time.perf_counter() - t0, len(batch.frames))
        return decoded

    def prepare(self, batch: Batch) -> _Decoded | None:
        """Decode the batch into its results. None: the pipeline is aborting."""
        decoded = self.decode(batch)
        if decoded is None:
            return None
        model = batch.model
        now = time.monotonic()
        results = [
            new_result(
                frame.stream_id,
                frame.sequence,
                frame.timestamp,
                model.name,
                model.version,
                frame.width,
                frame.height,
                (now - frame.captured) * 1000.0,
                d.detections,
                d.classifications,
                {k: v[i] for k, v in batch.outputs.items()} if self.keep_raw and d.raw is None else d.raw,
                source=frame.source,
            )
            for i, (frame, d) in enumerate(zip(batch.frames, decoded, strict=True))
        ]
        return _Decoded(batch, results, self._announce(model), getattr(decoded, "columns", None))

    def _gather(self, first: _Decoded) -> tuple[list[_Decoded], Any]:
        """``first`` and the decoded batches already waiting behind it (up to ``MERGE_FRAMES`` frames), to
        go through the analytics stages in one call; a batch announcing a change of the serving version
        starts the next group (the stages hear of it before its results). Returns the group and what to
        handle next (a batch, :data:`END`, or None: read the queue)."""
        assert self.handoff is not None
        group, frames = [first], len(first.results)
        while frames < MERGE_FRAMES:
            try:
                nxt = self.handoff.get_nowait()
            except queue.Empty:
                return group, None
            if nxt is END or nxt.change is not None:
                return group, nxt
            group.append(nxt)
            frames += len(nxt.results)
        return group, None

    def finish(self, group: list[_Decoded]) -> None:
        """Consecutive decoded batches of one serving version (one, or those :meth:`_gather` found
        waiting): the analytics stages on all their results in one call (a vectorised stage's per-call
        cost paid once), then each batch's sinks and ``results()``."""
        results = group[0].results if len(group) == 1 else [r for item in group for r in item.results]
        analysed = self._analyse(group[0], results)
        at = 0
        for item in group:
            n = len(item.results)
            if not self._deliver(item, analysed[at : at + n]):
                return
            at += n

    def _analyse(self, first: _Decoded, results: list[Result]) -> list[Result]:
        return self._start(first, results).take()

    def _start(self, first: _Decoded, results: list[Result]) -> _Analysing:
        """Start results (``first``'s batch, or a group it leads) through the analytics stages: the shadow
        sees them, the stages hear of a change of version, then they run (in the analytics process: are
        sent there, see :meth:`AnalyticsRunner.send`)."""
        shadow = self.swapper.shadow
        if shadow is not None:  # the serving half of a shadow pair (before analytics: the model's own output)
            shadow.observe(results)
        if not self.analytics:
            return _Analysing(Pending.done(results), None, 0.0)
        t0 = time.perf_counter()
        if first.change is not None:
            self.analytics.change(first.change)
        # the decoder's columns go as they are when these are its results alone; with no shadow holding
        # them, nobody but this thread has seen the results: the answer is attached to them in place
        columns = first.columns if results is first.results else None
        pending = self.analytics.send(results, columns, owned=shadow is None)
        return _Analysing(pending, self.stages["analytics"], time.perf_counter() - t0)

    def _deliver(self, item: _Decoded, results: list[Result]) -> bool:
        """One batch's analysed results to the sinks and ``results()``. False: the pipeline is aborting."""
        batch = item.batch
        model = batch.model
        labels = label_counts(r.detections for r in results)  # once, for both counters
        self.quality.add(model.ref, results, labels)
        self.labels.update(labels)
        t1 = time.perf_counter()
        for frame, result in zip(batch.frames, results, strict=True):
            for sink in self.sinks:
                sink.write(result, frame)
            stream = self.streams.get(frame.stream_id)
            if stream is not None:  # None: a stream removed past its timeout, results still in flight
                stream.results.add()
                stream.observe_latency(result.latency_ms)
                stream.model_ref = model.ref
            self.stages["end_to_end"].record(time.monotonic() - frame.captured)
            if self.results is not None and not self.flow.put(self.results, result):
                return False
        self.stages["sinks"].record(time.perf_counter() - t1, len(batch.frames))
        return True

    def _announce(self, model: LoadedModel) -> ModelChange | None:
        """What the analytics stages must hear before this batch when its version is not the last one's:
        a cut-over, or a rollback when the last one was rolled back."""
        last, self._serving = self._serving, model
        if last is model:
            return None
        kind: Literal["cutover", "rollback"] = "rollback" if self.swapper.rejected(last) else "cutover"
        return ModelChange(kind, *model_info(last), *model_info(model))
