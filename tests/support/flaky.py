"""A model version that passes a swap's gate and then fails: its decoder (registered the old way,
``register_decoder(name, factory)``) raises from its fourth batch on."""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from edgefleet.sdk import DecodeContext, Decoded, register_decoder
from edgefleet.sdk._decoders._detection import YoloDecoder, YoloParams


class FlakyYolo(YoloDecoder):
    def __init__(self, ctx: DecodeContext) -> None:
        super().__init__(ctx.parse(YoloParams), ctx)
        self.calls = itertools.count()

    def decode(self, outputs: Mapping[str, Any], transforms: Sequence[Any]) -> list[Decoded]:
        if next(self.calls) >= 3:  # the gate's warm-up and two live batches go through
            raise RuntimeError("decoder tripped on live outputs")
        return super().decode(outputs, transforms)


class SlowFlakyYolo(FlakyYolo):
    """:class:`FlakyYolo` that takes half a second over its first failure: the batches inferred in the
    meantime are still bound to it when it is rolled back."""

    def decode(self, outputs: Mapping[str, Any], transforms: Sequence[Any]) -> list[Decoded]:
        try:
            return super().decode(outputs, transforms)
        except RuntimeError:
            if not getattr(self, "slowed", False):
                self.slowed = True
                time.sleep(0.5)
            raise


def flaky_package(src: Path, dst: Path, slow: bool = False) -> Path:
    """A copy of the package at ``src`` decoded by :class:`FlakyYolo` (``slow``: :class:`SlowFlakyYolo`)."""
    key = "test-flaky-slow-yolo" if slow else "test-flaky-yolo"
    register_decoder(key, SlowFlakyYolo if slow else FlakyYolo, replace=True)
    shutil.copytree(src, dst)
    data = yaml.safe_load((dst / "manifest.yaml").read_text())
    data["decoder"]["type"] = key
    (dst / "manifest.yaml").write_text(yaml.safe_dump(data))
    return dst
