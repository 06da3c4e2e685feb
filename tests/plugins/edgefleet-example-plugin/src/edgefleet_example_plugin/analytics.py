"""Analytics ``example-debounce``: a stream's label changes only after it held for ``frames`` frames."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from edgefleet.sdk import (
    AnalyticsConfig,
    AnalyticsContext,
    AnalyticsStage,
    ModelChange,
    Result,
    register_analytics,
)


class DebounceConfig(AnalyticsConfig):
    type: Literal["example-debounce"] = "example-debounce"
    frames: int = Field(2, ge=1, description="Frames a new label must hold before it is reported")


class Debounce(AnalyticsStage):
    def __init__(self, config: DebounceConfig) -> None:
        self.frames = config.frames
        self.state: dict[str, tuple[str, str, int]] = {}  # stream -> (reported, candidate, run)
        self.changes = 0
        self.model_changes = 0

    def open(self, ctx: AnalyticsContext) -> None:
        self.state = {}

    def process(self, results: list[Result]) -> list[Result]:
        out = []
        for r in results:
            if not r.classifications:
                out.append(r)
                continue
            top = r.classifications[0]
            reported, candidate, run = self.state.get(r.stream_id, (top.label, top.label, 0))
            run = run + 1 if top.label == candidate else 1
            candidate = top.label
            if candidate != reported and run >= self.frames:
                reported = candidate
                self.changes += 1
            self.state[r.stream_id] = (reported, candidate, run)
            out.append(dataclasses.replace(r, classifications=(dataclasses.replace(top, label=reported),)))
        return out

    def on_model_change(self, change: ModelChange) -> None:
        self.model_changes += 1

    def stats(self) -> Mapping[str, float | int]:
        return {"label_changes_total": self.changes, "model_changes_total": self.model_changes}


def register() -> None:
    register_analytics("example-debounce", DebounceConfig, Debounce)
