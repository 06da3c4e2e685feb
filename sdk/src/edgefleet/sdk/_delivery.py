"""The pipeline's result stage (its thread: ``edgefleet-post``): batches back in formation order →
decode → :class:`Result` records → analytics stages → sinks and ``results()``.

Decoding runs here, a whole batch at a time (decoding on several threads was measured on an H200 and
did not help: the decoders' numpy work is bound by the GIL; docs/gpu.md). A model in its health window
whose decoder fails is rolled back like one whose inference fails, and the batch is re-run on the version
serving then. Analytics stages see each batch's results after that, and hear of every change of the
serving version before its first result reaches them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from ._analytics import ModelChange
from ._analytics._runner import AnalyticsRunner, ModelInfo
from ._decoders import Decoded
from ._flow import END, Batch, Flow
from ._metrics import CopyCounter, StageMetrics, StreamMetrics
from ._model import LoadedModel, ModelSlot
from ._quality import QualityMeter
from ._results import Result
from ._sinks import Sink
from ._stages import rerun
from ._swap import Swapper

__all__ = ["ResultStage", "model_info"]

_log = logging.getLogger(__name__)


def model_info(model: LoadedModel) -> ModelInfo:
    return (model.name, model.version, tuple(model.package.labels))


class ResultStage:
    """Delivers every frame's result exactly once, in formation order (one thread)."""

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
        self._serving = serving  # the version of the last batch delivered (the analytics opened on it)
        #: held while a batch is delivered: live changes swap sinks and analytics stages between batches
        self.lock = threading.Lock()

    def run(self) -> None:
        pending: dict[int, Batch] = {}  # batches that finished before an earlier one
        next_index = 0
        ends = 0
        failure: BaseException | None = None
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
                    try:
                        with self.lock:
                            self.deliver(ready)
                    finally:
                        ready.discard()
        except BaseException as exc:
            failure = exc
            raise
        finally:
            for batch in pending.values():
                batch.discard()
            self.finished_at = time.monotonic()
            self._close(failure)
            if self.results is not None and not flow.abort.is_set():
                flow.put(self.results, END)
            flow.done.set()

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
            if not self.swapper.watching(batch.model):
                self.flow.fail("decode", exc)  # reported as the decode stage, with the decoder's error
                return None
            self.swapper.fail(batch.model, f"decoding failed: {exc}")
            if not rerun(batch, self.slot, self.copies, self.flow.abort):
                return None
            decoded = batch.model.decoder.decode(batch.outputs, batch.transforms)
        self.stages["postprocess"].record(time.perf_counter() - t0, len(batch.frames))
        return decoded

    def deliver(self, batch: Batch) -> None:
        decoded = self.decode(batch)
        if decoded is None:
            return
        model = batch.model
        now = time.monotonic()
        results = [
            Result(
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
        shadow = self.swapper.shadow
        if shadow is not None:  # the serving half of a shadow pair (before analytics: the model's own output)
            shadow.observe(results)
        if self.analytics:
            t0 = time.perf_counter()
            self._announce(model)
            results = self.analytics.process(results)
            self.stages["analytics"].record(time.perf_counter() - t0, len(batch.frames))
        self.quality.add(model.ref, results)
        t1 = time.perf_counter()
        for frame, result in zip(batch.frames, results, strict=True):
            for det in result.detections:
                self.labels[det.label] += 1
            for sink in self.sinks:
                sink.write(result, frame)
            stream = self.streams[frame.stream_id]
            stream.results.add()
            stream.observe_latency(result.latency_ms)
            stream.model_ref = model.ref
            self.stages["end_to_end"].record(time.monotonic() - frame.captured)
            if self.results is not None and not self.flow.put(self.results, result):
                return
        self.stages["sinks"].record(time.perf_counter() - t1, len(batch.frames))

    def _announce(self, model: LoadedModel) -> None:
        """Tell the analytics stages when this batch's version is not the last one's: a cut-over, or a
        rollback when the last one was rolled back."""
        last, self._serving = self._serving, model
        if last is model:
            return
        kind: Literal["cutover", "rollback"] = "rollback" if self.swapper.rejected(last) else "cutover"
        self.analytics.change(ModelChange(kind, *model_info(last), *model_info(model)))
