"""The pipeline's batch and inference stages (their threads: ``edgefleet-batch``, ``edgefleet-infer*``).

``batch`` leases the serving model at each batch boundary, gathers frames across streams and
preprocesses them straight into one of the model's input buffers; ``infer`` runs the backend on it.
During a hot swap's health window a batch whose inference fails (or outputs NaN/Inf) rolls the model back
and is re-run on the previous version (:func:`rerun`), so each of its frames still gets one result.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from ._batcher import Batcher
from ._flow import END, Batch, Flow
from ._frames import Frame
from ._metrics import CopyCounter, StageMetrics
from ._model import ModelLease, ModelSlot
from ._preprocess import make_preprocessor
from ._swap import Swapper

__all__ = ["BatchStage", "InferStage", "rerun"]


class BatchStage:
    """Forms batches (one thread). ``workers``: the inference threads that each get an :data:`END`."""

    def __init__(
        self,
        flow: Flow,
        slot: ModelSlot,
        batcher: Batcher,
        out: queue.Queue[Any],
        swapper: Swapper,
        stages: dict[str, StageMetrics],
        *,
        workers: int,
        hold_pixels: bool,
    ) -> None:
        self.flow, self.slot, self.batcher, self.out, self.swapper = flow, slot, batcher, out, swapper
        self._queue, self._preprocess = stages["queue"], stages["preprocess"]
        self.workers = workers
        self.hold_pixels = hold_pixels  # a sink draws on the frames: keep their slots until it has
        self.batches = 0
        self.frames = 0

    def run(self) -> None:
        flow = self.flow
        try:
            while True:
                # Lease first: the batch is bound to the model serving now, and its size limit with it.
                lease = self.slot.lease()
                frames = self.batcher.next_batch(lease.model.max_batch, flow.abort)
                if frames is None:
                    lease.release()
                    return
                batch = self.form(frames, lease)
                if batch is None:
                    return
                if not flow.put(self.out, batch):
                    batch.discard()
                    return
        finally:
            for _ in range(self.workers):
                flow.put(self.out, END)

    def form(self, frames: list[Frame], lease: ModelLease) -> Batch | None:
        """Preprocess ``frames`` into a free input buffer of the leased model (None: aborting)."""
        model = lease.model
        buffer = None
        while buffer is None:
            if self.flow.abort.is_set():
                lease.release()
                for f in frames:
                    f.release()
                return None
            buffer = model.acquire_buffer(0.1)
        formed = time.monotonic()
        batch = Batch(frames, lease, buffer, [], formed, self.batches)
        swapper = self.swapper
        shadow = swapper.shadow
        for f in frames:
            self._queue.record(formed - f.captured)
            if swapper.sampling:
                swapper.offer_sample(f.image)
            if shadow is not None:
                shadow.offer(f)
        t0 = time.perf_counter()
        try:
            for i, f in enumerate(frames):
                batch.transforms.append(model.preprocess(f.image, buffer, i))
            model.preprocess.finish(buffer, len(frames))
        except BaseException:
            batch.discard()
            raise
        self._preprocess.record(time.perf_counter() - t0, len(frames))
        if not (self.hold_pixels or swapper.holding_pixels()):
            for f in frames:
                f.release()  # pixels are in the input buffer now; the slot can take the next frame
        self.batches += 1
        self.frames += len(frames)
        return batch


class InferStage:
    """Runs the backend on formed batches (one or more worker threads share one instance)."""

    def __init__(
        self,
        flow: Flow,
        inbox: queue.Queue[Any],
        out: queue.Queue[Any],
        swapper: Swapper,
        slot: ModelSlot,
        copies: CopyCounter,
        metrics: StageMetrics,
    ) -> None:
        self.flow, self.inbox, self.out, self.swapper = flow, inbox, out, swapper
        self.slot, self.copies, self.metrics = slot, copies, metrics

    def run(self) -> None:
        flow, swapper = self.flow, self.swapper
        try:
            while True:
                batch = flow.get(self.inbox)
                if batch is END:
                    return
                t0 = time.perf_counter()
                failure: str | None = "rolled back" if swapper.rejected(batch.model) else None
                try:
                    if failure is None:
                        batch.outputs = batch.model.backend.infer(batch.buffer, len(batch.frames))
                except Exception as exc:
                    if not swapper.watching(batch.model):
                        batch.discard()
                        raise
                    failure = swapper.fail(batch.model, f"inference failed: {exc}")
                finally:
                    if batch.buffer is not None:
                        batch.model.release_buffer(batch.buffer)
                        batch.buffer = None
                elapsed = time.perf_counter() - t0
                if failure is None and swapper.watching(batch.model):
                    failure = swapper.check_batch(batch.model, batch.outputs, elapsed * 1000.0)
                if failure is not None and not rerun(batch, self.slot, self.copies, flow.abort):
                    batch.discard()
                    return
                self.metrics.record(elapsed, len(batch.frames))
                if not flow.put(self.out, batch):
                    batch.discard()
                    return
        finally:
            flow.put(self.out, END)


def rerun(batch: Batch, slot: ModelSlot, copies: CopyCounter, abort: threading.Event) -> bool:
    """Re-run a batch the new model failed on with the version now serving (after the rollback), so its
    frames still get exactly one result each. Runs on an inference worker, or on the result thread when
    the new model's decoder failed. False: the pipeline is aborting."""
    lease = slot.lease()
    model = lease.model
    buffer = None
    while buffer is None:
        if abort.is_set():
            lease.release()
            return False
        buffer = model.acquire_buffer(0.1)
    try:
        # A private preprocessor: the batch thread is using the serving model's own at the same time.
        pre = make_preprocessor(model.package.manifest.input, buffer.device, copies)
        batch.transforms = [pre(f.image, buffer, i) for i, f in enumerate(batch.frames)]
        pre.finish(buffer, len(batch.frames))
        batch.outputs = model.backend.infer(buffer, len(batch.frames))
    finally:
        model.release_buffer(buffer)
    batch.lease.release()
    batch.lease = lease
    return True
