"""Sink ``example-csv``: one line per result, ``stream,sequence,version,label,score``."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Literal

from pydantic import Field

from edgefleet.sdk import Frame, Result, Sink, SinkConfig, SinkContext, SinkError, register_sink


class CsvConfig(SinkConfig):
    type: Literal["example-csv"] = "example-csv"
    path: Path = Field(description="The CSV file (replaced)")


class CsvSink(Sink):
    def __init__(self, config: CsvConfig, ctx: SinkContext) -> None:
        self.path = config.path  # a sink with a path is kept from writing over the pipeline's inputs
        self.pipeline = ctx.pipeline
        self._f: IO[str] | None = None

    def open(self) -> None:
        try:
            self._f = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise SinkError(f"{self.path}: cannot write: {exc.strerror}") from None
        self._f.write("pipeline,stream,sequence,version,label,score\n")

    def write(self, result: Result, frame: Frame) -> None:
        if self._f is None:
            raise SinkError(f"{self.path}: not open")
        top = result.classifications[0] if result.classifications else None
        label, score = (top.label, f"{top.score:.4f}") if top else ("", "")
        self._f.write(f"{self.pipeline},{result.stream_id},{result.sequence},{result.model_version},{label},{score}\n")
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def register() -> None:
    register_sink("example-csv", CsvConfig, CsvSink)
