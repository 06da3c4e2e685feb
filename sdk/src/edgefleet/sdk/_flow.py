"""What a pipeline's threads share: the stop and abort flags, the first failure, bounded hand-offs that
give up when the pipeline aborts, and the batch record that travels from stage to stage.

The first exception in any thread aborts the whole pipeline; :meth:`Flow.raise_if_failed` re-raises it to
the caller as :class:`PipelineError` naming the stage, with the original as its cause.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._backends import InputBuffer
from ._errors import PipelineError
from ._frames import Frame
from ._log_context import bind
from ._model import LoadedModel, ModelLease
from ._redact import redact
from ._transform import Transform

__all__ = ["END", "Batch", "Flow", "StopEvent"]

_log = logging.getLogger(__name__)
END = object()
"""Put on a stage queue by the stage before it when it has no more batches."""


@dataclass
class Batch:
    """Frames bound to one model version (their lease) from preprocessing until their results are out."""

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

    def discard(self) -> None:
        """Give back the frames' slots, the input buffer and the model lease (each at most once), and
        let go of the frames: a stage thread keeps its last batch while it waits for the next, and a
        removed stream's frame memory must not wait with it."""
        for f in self.frames:
            f.release()
        self.frames.clear()  # (the list the batch stage formed it from, which that thread still holds)
        if self.buffer is not None:
            self.model.release_buffer(self.buffer)
            self.buffer = None
        self.lease.release()


class StopEvent(threading.Event):
    """The pipeline's "stop reading" flag, with one child flag per source: setting it sets every child;
    setting a child stops only its source (a source removed from a running pipeline)."""

    def __init__(self) -> None:
        super().__init__()
        self._children: set[threading.Event] = set()
        self._children_lock = threading.Lock()

    def child(self) -> threading.Event:
        """A flag set when this one is (already set if this one is); :meth:`forget` it when done."""
        event = threading.Event()
        with self._children_lock:
            self._children.add(event)
            if self.is_set():
                event.set()
        return event

    def forget(self, child: threading.Event) -> None:
        with self._children_lock:
            self._children.discard(child)

    def set(self) -> None:
        super().set()
        with self._children_lock:
            children = list(self._children)
        for event in children:
            event.set()


class Flow:
    """The flags and the first failure of one pipeline run."""

    def __init__(self, name: str = "default") -> None:
        self.name = name  # the pipeline's, on the log lines of its threads
        self.stop_sources = StopEvent()  # sources stop reading; what was read is still delivered
        self.abort = threading.Event()  # every stage stops now
        self.done = threading.Event()  # every result delivered, or the run failed
        self._error: tuple[str, BaseException] | None = None
        self._lock = threading.Lock()

    @property
    def error(self) -> BaseException | None:
        return self._error[1] if self._error else None

    @property
    def failed(self) -> bool:
        return self._error is not None

    def fail(self, stage: str, exc: BaseException, *, log: bool = True) -> None:
        """Record the first failure and stop everything (``log``: say so at ERROR; False when the caller
        reports it itself, as one line on the command line)."""
        with self._lock:
            if self._error is None:
                self._error = (stage, exc)
                if log:
                    _log.error("%s failed: %s", stage, redact(str(exc)) or type(exc).__name__)
        self.stop_sources.set()
        self.abort.set()
        self.done.set()

    def raise_if_failed(self) -> None:
        if self._error is not None:
            stage, exc = self._error
            msg = redact(str(exc)) or type(exc).__name__
            raise PipelineError(f"{stage}: {msg}", stage=stage) from exc

    def guard(self, name: str, fn: Callable[[], None]) -> Callable[[], None]:
        """``fn`` for a stage thread: what it raises fails the pipeline as stage ``name``."""

        def run() -> None:
            bind(pipeline=self.name)
            try:
                fn()
            except BaseException as exc:
                self.fail(name, exc)

        return run

    def put(self, q: queue.Queue[Any], item: Any) -> bool:
        """Put ``item``, waiting for room; False when the pipeline aborts first."""
        while not self.abort.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def get(self, q: queue.Queue[Any]) -> Any:
        """The next item, or :data:`END` when the pipeline aborts first."""
        while not self.abort.is_set():
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue
        return END
