"""Runs a pipeline's analytics stages on its result thread, in list order, and keeps them to their contract."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import AnalyticsError
from .._results import Result
from ._base import ANALYTICS, AnalyticsConfig, AnalyticsContext, AnalyticsStage, ModelChange

__all__ = ["AnalyticsRunner", "ModelInfo"]

_log = logging.getLogger(__name__)
ModelInfo = tuple[str, str, tuple[str, ...]]  # name, version, labels


class AnalyticsRunner:
    """The stages of one pipeline, named by their config's ``type`` (or class), ``#2`` on for repeats."""

    def __init__(self, stages: Sequence[tuple[str, AnalyticsStage]]) -> None:
        self.stages = list(stages)
        self._opened: list[AnalyticsStage] = []

    @classmethod
    def build(cls, items: Sequence[AnalyticsConfig | AnalyticsStage]) -> AnalyticsRunner:
        named: list[tuple[str, AnalyticsStage]] = []
        seen: dict[str, int] = {}
        for item in items:
            base = item.type if isinstance(item, AnalyticsConfig) else type(item).__name__
            stage = ANALYTICS.build(item) if isinstance(item, AnalyticsConfig) else item
            if not isinstance(stage, AnalyticsStage):
                got = type(stage).__name__
                raise AnalyticsError(f"analytics {base!r}: its factory returned a {got}, not an AnalyticsStage")
            seen[base] = seen.get(base, 0) + 1
            named.append((base if seen[base] == 1 else f"{base}#{seen[base]}", stage))
        return cls(named)

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
        """One batch's results through every stage, in order; each must give back as many, in order."""
        n = len(results)
        for name, stage in self.stages:
            out = stage.process(results)
            if not isinstance(out, list) or len(out) != n or not all(isinstance(r, Result) for r in out):
                got = f"{len(out)} items" if isinstance(out, list) else type(out).__name__
                raise AnalyticsError(f"analytics {name}: process() must return a list of {n} results, got {got}")
            if any(a.stream_id != b.stream_id or a.sequence != b.sequence for a, b in zip(out, results, strict=True)):
                raise AnalyticsError(f"analytics {name}: process() changed the order of the results")
            results = out
        return results

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
        """Close every opened stage, in reverse; the first failure is raised after all were tried."""
        failure: BaseException | None = None
        while self._opened:
            stage = self._opened.pop()
            try:
                stage.close()
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
