"""Load-time checks that catch silent mistakes in a manifest (issue 19's findings): each of them passed
``models inspect`` (and most ``edgefleet run``) before, with wrong results or an error about something
else. The same checks run in ``inspect``, ``run``, the agent's load (``load_model``) and ``models push`` /
the controller (``check_model_file``, no ONNX Runtime)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from edgefleet.sdk import DecoderError, ManifestError, ModelMismatchError, load_package
from edgefleet.sdk._model import load_model
from edgefleet.sdk._onnx_check import check_model_file
from tests.support.onnx_models import constant_head_model, write_package, yolo_const

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, timeout=120, check=False)


def _edit(pkg: Path, **changes: object) -> None:
    """Change top-level or dotted (``input.layout``, ``decoder.reg_max``) manifest keys; None removes."""
    path = pkg / "manifest.yaml"
    data = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        *parents, leaf = key.split("__")
        node = data
        for p in parents:
            node = node[p]
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _nhwc_package(root: Path, layout: str, shape: list[int]) -> Path:
    """A model whose input is NHWC (1, 32, 32, 3), declared with ``layout`` and ``shape``."""
    root.mkdir(parents=True)
    const = yolo_const(2, [(16, 16, 8, 8, 0, 0.9)])
    constant_head_model(root / "model.onnx", const, size=32, layout="NHWC", dynamic_batch=False)
    return write_package(
        root,
        name="nhwc",
        version="1.0.0",
        task="detection",
        input_spec={"name": "images", "shape": shape, "layout": layout, "std": [255, 255, 255]},
        outputs=[{"name": "output0", "shape": [1, 6, 16]}],
        decoder={"type": "yolo"},
        labels=["a", "b"],
    )


def test_nchw_declared_for_an_nhwc_model_is_refused_naming_the_layout(tmp_path: Path) -> None:
    # The model's real input is (1, 32, 32, 3); NCHW with that shape read "3 rows of width 3" before.
    pkg = _nhwc_package(tmp_path / "p", "NCHW", [1, 32, 32, 3])
    with pytest.raises(
        ManifestError, match=r"input: .*layout NCHW puts the colour channels at dimension 1.*is the model NHWC"
    ):
        load_package(pkg)
    for cmd in (["models", "inspect", str(pkg)], ["run", "-m", str(pkg), "-s", "synthetic:?frames=2"]):
        res = _cli(*cmd)
        assert res.returncode != 0 and "Traceback" not in res.stderr
        assert "layout NCHW puts the colour channels at dimension 1" in res.stderr


def test_the_right_layout_loads(tmp_path: Path) -> None:
    pkg = load_package(_nhwc_package(tmp_path / "p", "NHWC", [1, 32, 32, 3]))
    model = load_model(pkg, warmup=False)
    model.close()


def test_nhwc_declared_for_an_nchw_model_names_the_layout_not_the_strides(nanodet: Path, tmp_path: Path) -> None:
    pkg = tmp_path / "nanodet"
    shutil.copytree(nanodet, pkg)
    _edit(pkg, input__layout="NHWC")  # shape stays [-1, 3, 416, 416]
    with pytest.raises(
        ManifestError, match=r"layout NHWC puts the colour channels at dimension 3 .* is the model NCHW"
    ):
        load_package(pkg)


def test_a_model_whose_real_input_has_its_channels_elsewhere_is_refused_naming_the_layout(tmp_path: Path) -> None:
    # Declared NCHW (1, 3, 32, 32) for a model taking (1, 32, 32, 3): the shapes differ, and why.
    pkg = _nhwc_package(tmp_path / "p", "NCHW", [1, 3, 32, 32])
    with pytest.raises(ModelMismatchError, match=r"the model's input is NHWC"):
        load_model(load_package(pkg), warmup=False)
    with pytest.raises(ModelMismatchError, match=r"the model's input is NHWC"):
        check_model_file(pkg, load_package(pkg).manifest)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"decoder__score_treshold": 0.3}, r"score_treshold: Extra inputs are not permitted"),
        ({"decoder__reg_max": 7}, r"reg_8.* has 44 box bins; reg_max 7 needs 4 x 8 = 32"),
        ({"decoder__strides": [8, 16]}, r"outputs \['cls_32', 'reg_32'\] are read by no stride"),
    ],
)
def test_models_inspect_checks_the_decoder(
    nanodet: Path, tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    pkg = tmp_path / "nanodet"
    shutil.copytree(nanodet, pkg)
    _edit(pkg, **changes)
    for extra in ([], ["--no-load"]):  # loaded in ONNX Runtime, or only the graph read (as push does)
        res = _cli("models", "inspect", str(pkg), *extra)
        assert res.returncode != 0, res.stdout
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
        assert __import__("re").search(message, res.stderr), res.stderr
    # models push and the controller (a parameter the decoder's schema refuses fails as the manifest is read)
    with pytest.raises((DecoderError, ManifestError), match=message):
        loaded = load_package(pkg)
        check_model_file(loaded.root, loaded.manifest, labels=loaded.labels)


def _symbolic_anchors(root: Path, declared_anchors: int) -> Path:
    """A YOLO-layout model whose graph names its anchor dimension (as exporters do with dynamic=True):
    16 anchors at run time, ``declared_anchors`` in the manifest."""
    root.mkdir(parents=True)
    const = yolo_const(3, [(32, 32, 16, 16, 0, 0.9)], anchors=16)
    constant_head_model(root / "model.onnx", const, size=64, symbolic_last_dim=True)
    return write_package(
        root,
        name="sym",
        version="1.0.0",
        task="detection",
        input_spec={"name": "images", "shape": [-1, 3, 64, 64], "std": [255, 255, 255]},
        outputs=[{"name": "output0", "shape": [-1, 7, declared_anchors]}],
        decoder={"type": "yolo"},
        labels=["a", "b", "c"],
    )


def test_a_declared_output_dimension_the_graph_leaves_symbolic_is_checked_on_a_dry_run(tmp_path: Path) -> None:
    pkg = _symbolic_anchors(tmp_path / "bad", 8400)
    with pytest.raises(
        ModelMismatchError, match=r"output0 has shape \[-1, 7, 8400\], the model's is \[-1, 7, 16\] when it runs"
    ):
        load_model(load_package(pkg), warmup=False)
    res = _cli("models", "inspect", str(pkg))
    assert res.returncode != 0 and "the model's is [-1, 7, 16] when it runs" in res.stderr
    good = load_model(load_package(_symbolic_anchors(tmp_path / "good", 16)), warmup=False)
    try:
        assert good.output_shapes["output0"] == (-1, 7, 16)
    finally:
        good.close()


def test_a_dynamic_declared_dimension_is_resolved_for_the_decoder(tmp_path: Path) -> None:
    pkg = _symbolic_anchors(tmp_path / "p", -1)
    model = load_model(load_package(pkg), warmup=False)
    try:
        assert model.output_shapes["output0"] == (-1, 7, 16)
        buf = model.acquire_buffer(1.0)
        assert buf is not None
        t = model.preprocess(np.zeros((64, 64, 3), np.uint8), buf, 0)
        (decoded,) = model.decoder.decode(model.backend.infer(buf, 1), [t])
        assert [d.class_id for d in decoded.detections] == [0]
    finally:
        model.close()
