"""The sink contract: results (and, for sinks that need them, the frame pixels) go out of the pipeline;
the base of every sink kind's config, and the sink registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import SinkError
from .._frames import Frame
from .._registry import PluginConfig, Registry
from .._results import Result

__all__ = ["SINKS", "Sink", "SinkConfig", "SinkContext", "build_sink", "register_sink"]


class SinkConfig(PluginConfig):
    """Base of a sink kind's config: ``type: Literal["<key>"]`` and its settings (strict)."""


@dataclass(frozen=True)
class SinkContext:
    """What a sink factory gets besides its config: the pipeline's name and streams, and the services the
    program hosting the pipeline offers its sinks (the agent offers ``telemetry``; ``edgefleet run`` none)."""

    pipeline: str = "default"
    stream_ids: tuple[str, ...] = ()
    services: Mapping[str, Any] = field(default_factory=dict)


class Sink(ABC):
    """``write`` is called from the pipeline's result thread, in order per stream.

    ``frame.image`` is valid only during the call: a sink that keeps pixels copies them.
    """

    needs_pixels: bool = False
    #: set by the pipeline before ``open``: the nominal frame rate of a stream, when known
    stream_fps: Callable[[str], float | None] | None = None

    def open(self) -> None:
        """Called once before the first result."""

    @abstractmethod
    def write(self, result: Result, frame: Frame) -> None: ...

    def on_stream_removed(self, stream_id: str) -> None:
        """A stream left the running pipeline after its last result (between two batches)."""

    def close(self) -> None:
        """Called once at shutdown (or when the sink is removed from a running pipeline, after its last
        result); flushes and releases files."""


SINKS: Registry[SinkConfig] = Registry("sink", SinkConfig, SinkError, group="edgefleet.sinks")

SinkFactory = Callable[[Any, SinkContext], Sink]
"""``factory(config, ctx) -> Sink``: built, not opened (the pipeline opens it when it starts)."""


def register_sink(
    key: str,
    config: type[SinkConfig],
    factory: SinkFactory,
    *,
    extra: str | None = None,
    replace: bool = False,
) -> None:
    """Make a sink available to pipeline configs as ``sinks: [{type: <key>, ...}]``.

    ``config``: its settings (a :class:`SinkConfig` with ``type: Literal["<key>"]``); ``factory(config,
    ctx)`` builds the :class:`Sink` (``ctx``: :class:`SinkContext`); ``extra``: the pip extra that
    installs what it needs. A sink with a ``path`` attribute is kept from writing over the pipeline's
    inputs and over another sink's file.

    Example::

        class CsvConfig(SinkConfig):
            type: Literal["csv"] = "csv"
            path: Path

        register_sink("csv", CsvConfig, lambda config, ctx: CsvSink(config.path))
    """
    SINKS.register(key, config, factory, extra=extra, replace=replace, origin="register_sink")


def build_sink(config: SinkConfig, ctx: SinkContext) -> Sink:
    """Build (not open) the sink a config selects."""
    sink = SINKS.build(config, ctx)
    if not isinstance(sink, Sink):
        raise SinkError(f"sink {config.type!r}: its factory returned a {type(sink).__name__}, not a Sink")
    return sink
