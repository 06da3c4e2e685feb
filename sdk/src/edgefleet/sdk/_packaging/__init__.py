"""Making and changing model packages: ``models init`` (a package from a plain ONNX file), ``bump``,
``pack`` (a signed, reproducible tar), ``verify`` and ``quantize`` (an INT8 version checked against FP32)."""

from __future__ import annotations

from ._edit import BumpReport, bump_package, next_version
from ._init import InitReport, init_package, read_labels
from ._pack import VerifyReport, pack_package, verify_package
from ._quantize import QuantizeReport, quantize_package

__all__ = [
    "BumpReport",
    "InitReport",
    "QuantizeReport",
    "VerifyReport",
    "bump_package",
    "init_package",
    "next_version",
    "pack_package",
    "quantize_package",
    "read_labels",
    "verify_package",
]
