"""TEMPORARY: the analytics stage contract of docs/SEAM_CONTRACT (issue 17) until the seam lands on main.

Replaced by the seam's own base module at the merge; nothing outside ``_analytics`` imports this.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .._results import Result

__all__ = ["AnalyticsConfig", "AnalyticsContext", "AnalyticsStage", "ModelChange"]


class AnalyticsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    type: str = Field(description="Which analytics stage")


@dataclass(frozen=True)
class AnalyticsContext:
    stream_ids: tuple[str, ...]
    model_name: str
    model_version: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class ModelChange:
    kind: Literal["cutover", "rollback"]
    old_name: str
    old_version: str
    old_labels: tuple[str, ...]
    new_name: str
    new_version: str
    new_labels: tuple[str, ...]


class AnalyticsStage(ABC):
    def open(self, ctx: AnalyticsContext) -> None:
        """Once, before the first result."""

    @abstractmethod
    def process(self, results: list[Result]) -> list[Result]: ...

    def on_model_change(self, change: ModelChange) -> None:
        """At a hot swap's cut-over or a rollback."""

    def stats(self) -> Mapping[str, float | int]:
        return {}

    def close(self) -> None:
        """Once, at shutdown."""
