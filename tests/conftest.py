"""Shared fixtures. Tests mirror the packages: unit/ (in-process, real libraries, no servers),
integration/ (real servers on loopback), gpu/ (marker ``gpu``, skip without an NVIDIA GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
NANODET = REPO / "models" / "nanodet-m"
CLIP = REPO / "models" / "media" / "vtest-300.mp4"


#: the outcome of a test's call phase, for fixtures that report more when it failed
FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    return report


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def nanodet() -> Path:
    if not (NANODET / "manifest.yaml").exists():
        pytest.fail("models/nanodet-m is missing from the checkout")
    return NANODET


@pytest.fixture(scope="session")
def clip() -> Path:
    if not CLIP.exists():
        pytest.fail("models/media/vtest-300.mp4 is missing from the checkout")
    return CLIP


@pytest.fixture(scope="session")
def toy_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small real ONNX model packages built in-process (tests/support/onnx_models.py)."""
    from tests.support import onnx_models as m

    root = tmp_path_factory.mktemp("toy-models")
    return {
        "yolo": m.yolo_package(root / "yolo"),
        "yolo_v2": m.yolo_package(root / "yolo-v2", version="2.0.0", size=96, labels=("a", "b", "c", "d", "e")),
        "yolo_fixed": m.yolo_package(root / "yolo-fixed", dynamic_batch=False),
        "yolo_nan": m.yolo_package(root / "yolo-nan", version="9.0.0", nan=True),
        "cls": m.classifier_package(root / "cls"),
        "identity": m.identity_package(root / "identity"),
    }
