"""Runs a pipeline's analytics stages on its result thread, in list order, and keeps them to their contract."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._decoders import BatchColumns
from .._errors import AnalyticsError
from .._results import Result
from ._base import AnalyticsConfig, AnalyticsContext, AnalyticsStage, ModelChange, build_stage
from ._remote import REMOTE_TYPES, AnalyticsProcess, RemoteStage

__all__ = ["AnalyticsRunner", "ModelInfo", "Pending"]

_log = logging.getLogger(__name__)
ModelInfo = tuple[str, str, tuple[str, ...]]  # name, version, labels


@dataclass(slots=True)
class Pending:
    """A batch started through the stages (:meth:`AnalyticsRunner.send`): ``take()`` gives its results;
    ``ready(timeout)`` says whether they are there, waiting up to ``timeout`` seconds for them."""

    take: Callable[[], list[Result]]
    ready: Callable[[float], bool]

    @classmethod
    def done(cls, results: list[Result]) -> Pending:
        """Results there already (stages run here, or none at all)."""
        return cls(lambda: results, _there)


def _there(_timeout: float) -> bool:
    return True


class AnalyticsRunner:
    """The stages of one pipeline, named by their config's ``type`` (or class), ``#2`` on for repeats."""

    def __init__(self, stages: Sequence[tuple[str, AnalyticsStage]], worker: AnalyticsProcess | None = None) -> None:
        self.stages = list(stages)
        self._opened: list[AnalyticsStage] = []
        #: the analytics process (``analytics_process``): the built-in stages run there
        self.worker = worker

    @classmethod
    def build(cls, items: Sequence[AnalyticsConfig | AnalyticsStage], *, process: bool = False) -> AnalyticsRunner:
        runner = cls([], AnalyticsProcess() if process else None)
        seen: dict[str, int] = {}
        for item in items:
            base = item.type if isinstance(item, AnalyticsConfig) else type(item).__name__
            stage = runner.stage(item) if isinstance(item, AnalyticsConfig) else item
            seen[base] = seen.get(base, 0) + 1
            runner.stages.append((base if seen[base] == 1 else f"{base}#{seen[base]}", stage))
        return runner

    def stage(self, config: AnalyticsConfig) -> AnalyticsStage:
        """The stage a config makes in this pipeline: in the analytics process for a built-in type when the
        pipeline has one, else here."""
        if self.worker is not None and config.type in REMOTE_TYPES:
            build_stage(config)  # its checks (a missing extra) here, as a ConfigError, before the process
            return RemoteStage(self.worker, config)
        return build_stage(config)

    def __bool__(self) -> bool:
        return bool(self.stages)

    def open(self, stream_ids: Sequence[str], model: ModelInfo) -> None:
        """Open every stage (a failure closes the ones opened and raises)."""
        ctx = AnalyticsContext(tuple(stream_ids), model[0], model[1], model[2])
        try:
            for name, stage in self.stages:
                try:
                    stage.open(ctx)
                except AnalyticsError:
                    raise
                except Exception as exc:
                    raise AnalyticsError(f"analytics {name}: open failed: {type(exc).__name__}: {exc}") from exc
                self._opened.append(stage)
        except BaseException:
            self.close()
            raise

    def change(self, change: ModelChange) -> None:
        """The serving version changed: every stage hears it before the new version's first result."""
        for _, stage in self.stages:
            stage.on_model_change(change)

    def process(self, results: list[Result]) -> list[Result]:
        """One batch's results through every stage, in order; each must give back as many, in order.
        Consecutive stages of the analytics process go there in one round trip."""
        n = len(results)
        stages = self.stages
        i = 0
        while i < len(stages):
            name, stage = stages[i]
            i += 1
            if isinstance(stage, RemoteStage):
                group = [stage]
                while i < len(stages) and isinstance(stages[i][1], RemoteStage):
                    group.append(stages[i][1])  # type: ignore[arg-type]
                    i += 1
                results = stage.worker.process(group, results)  # order and count kept by construction
                continue
            out = stage.process(results)
            if not isinstance(out, list) or len(out) != n or not all(isinstance(r, Result) for r in out):
                got = f"{len(out)} items" if isinstance(out, list) else type(out).__name__
                raise AnalyticsError(f"analytics {name}: process() must return a list of {n} results, got {got}")
            if any(a.stream_id != b.stream_id or a.sequence != b.sequence for a, b in zip(out, results, strict=True)):
                raise AnalyticsError(f"analytics {name}: process() changed the order of the results")
            results = out
        return results

    @property
    def remote(self) -> bool:
        """Whether there are stages and every one runs in the analytics process (:meth:`send` sends)."""
        return bool(self.stages) and all(isinstance(stage, RemoteStage) for _, stage in self.stages)

    def send(self, results: list[Result], columns: BatchColumns | None = None, *, owned: bool = False) -> Pending:
        """Start one batch through every stage; returns what gives the results. Where every stage runs in
        the analytics process the batch is sent there and the call takes its answer (the process works on
        it meanwhile); otherwise the stages run now (:meth:`process`). ``columns`` and ``owned``: see
        :meth:`AnalyticsProcess.send`."""
        if not self.remote:
            return Pending.done(self.process(results))
        group: list[RemoteStage] = [stage for _, stage in self.stages]  # type: ignore[misc]
        worker = group[0].worker
        sent = worker.send(group, results, columns, owned=owned)
        return Pending(functools.partial(worker.take, sent), functools.partial(worker.answered, sent))

    def stats(self) -> dict[str, dict[str, float | int]]:
        out: dict[str, dict[str, float | int]] = {}
        for name, stage in self.stages:
            try:
                figures: Mapping[str, Any] = stage.stats()
                out[name] = {k: v for k, v in figures.items() if isinstance(v, (int, float))}
            except Exception:  # a stage's counters must not break stats() for the whole pipeline
                _log.warning("analytics %s: stats() failed", name, exc_info=True)
        return out

    def close(self) -> None:
        """Close every opened stage, in reverse, then stop the analytics process; the first failure is
        raised after all were tried."""
        failure: BaseException | None = None
        while self._opened:
            stage = self._opened.pop()
            try:
                stage.close()
            except Exception as exc:
                failure = failure or exc
        if self.worker is not None:
            self.worker.stop()
        if failure is not None:
            raise failure
