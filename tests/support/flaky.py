"""A model version that passes a swap's gate and then fails: its decoder (registered the old way,
``register_decoder(name, factory)``) raises from its fourth batch on."""

from __future__ import annotations

import itertools
import shutil
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


def flaky_package(src: Path, dst: Path) -> Path:
    """A copy of the package at ``src`` decoded by :class:`FlakyYolo`."""
    register_decoder("test-flaky-yolo", FlakyYolo, replace=True)
    shutil.copytree(src, dst)
    data = yaml.safe_load((dst / "manifest.yaml").read_text())
    data["decoder"]["type"] = "test-flaky-yolo"
    (dst / "manifest.yaml").write_text(yaml.safe_dump(data))
    return dst
