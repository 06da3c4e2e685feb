"""The analytics contract: stages between decoding and the sinks (tracking, zones, line crossings, ...).

A stage sees every result of the pipeline once, on the pipeline's result thread, a batch at a time, in
order per stream, and may replace each :class:`~edgefleet.sdk.Result` (``dataclasses.replace``) to attach
what it found before the sinks see it. It hears about every change of the serving model (a hot swap's
cut-over, a rollback) before the first result of the new version reaches it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from .._errors import AnalyticsError
from .._registry import PluginConfig, Registry
from .._results import Result

__all__ = [
    "ANALYTICS",
    "AnalyticsConfig",
    "AnalyticsContext",
    "AnalyticsStage",
    "ModelChange",
    "build_stage",
    "register_analytics",
]


class AnalyticsConfig(PluginConfig):
    """Base of an analytics stage's config: ``type: Literal["<key>"]`` and its settings (strict)."""


@dataclass(frozen=True)
class AnalyticsContext:
    """What a stage gets once, before the first result: the pipeline's streams and the serving model."""

    stream_ids: tuple[str, ...]
    model_name: str
    model_version: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class ModelChange:
    """The serving model changed between two results: ``cutover`` (a hot swap) or ``rollback``."""

    kind: Literal["cutover", "rollback"]
    old_name: str
    old_version: str
    old_labels: tuple[str, ...]
    new_name: str
    new_version: str
    new_labels: tuple[str, ...]


class AnalyticsStage(ABC):
    """One analytics stage. Lifecycle: ``open`` → (``process`` | ``on_model_change``)* → ``close``, all
    on the pipeline's result thread except ``open`` (the thread that starts the pipeline) and ``stats``
    (any thread: keep it to reading counters).

    Example::

        class PersonCounter(AnalyticsStage):
            def open(self, ctx: AnalyticsContext) -> None:
                self.people = 0

            def process(self, results: list[Result]) -> list[Result]:
                self.people += sum(d.label == "person" for r in results for d in r.detections)
                return results

            def stats(self) -> Mapping[str, float | int]:
                return {"people_total": self.people}
    """

    def open(self, ctx: AnalyticsContext) -> None:
        """Once, before the first result (a stage added to a running pipeline: when it is added)."""

    @abstractmethod
    def process(self, results: list[Result]) -> list[Result]:
        """One batch's results (several streams, each frame exactly once, in order per stream); return the
        same number of results in the same order, each the one given or its replacement."""

    def on_model_change(self, change: ModelChange) -> None:
        """Before the first result of a new serving version (class ids may mean other labels now)."""

    def on_stream_removed(self, stream_id: str) -> None:
        """A stream left the running pipeline (``Pipeline.remove_source``/``replace_source``) after its
        last result: forget what is kept for it. Called between two batches, off the result thread."""

    def stats(self) -> Mapping[str, float | int]:
        """Counters for telemetry and Prometheus; may be empty."""
        return {}

    def close(self) -> None:
        """Once, after the last result (a stage removed from a running pipeline: on the thread that
        removed it, after its last batch)."""


ANALYTICS: Registry[AnalyticsConfig] = Registry(
    "analytics", AnalyticsConfig, AnalyticsError, group="edgefleet.analytics"
)


def build_stage(config: AnalyticsConfig) -> AnalyticsStage:
    """The stage a config's factory makes; :class:`AnalyticsError` when it makes something else."""
    stage = ANALYTICS.build(config)
    if not isinstance(stage, AnalyticsStage):
        got = type(stage).__name__
        raise AnalyticsError(f"analytics {config.type!r}: its factory returned a {got}, not an AnalyticsStage")
    return stage


def register_analytics(
    key: str,
    config: type[AnalyticsConfig],
    factory: Callable[[AnalyticsConfig], AnalyticsStage],
    *,
    extra: str | None = None,
    replace: bool = False,
) -> None:
    """Make an analytics stage available to pipeline configs as ``analytics: [{type: <key>, ...}]``.

    ``config``: its settings (an :class:`AnalyticsConfig` with ``type: Literal["<key>"]``);
    ``factory(config)`` builds the stage when the pipeline is made; ``extra``: the pip extra that
    installs what it needs.

    Example::

        class CounterConfig(AnalyticsConfig):
            type: Literal["person-counter"] = "person-counter"

        register_analytics("person-counter", CounterConfig, lambda config: PersonCounter())
    """
    ANALYTICS.register(key, config, factory, extra=extra, replace=replace, origin="register_analytics")
