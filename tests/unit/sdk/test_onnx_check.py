"""The model file checked without ONNX Runtime (what the controller and `models push` run): a file that is
not ONNX, a truncated one, or one whose tensors contradict the manifest is refused naming the file and why;
real models pass, and what it reads agrees with what ONNX Runtime reports."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from edgefleet.sdk import ModelMismatchError, ModelPackageError, load_package
from edgefleet.sdk._onnx_check import check_model_file, read_graph_interface
from tests.support.onnx_models import write_package


def _rewrite(pkg: Path, onnx_bytes: bytes | None = None, **manifest: object) -> None:
    """Replace the model's bytes and/or manifest fields, with the file hashes recomputed (as a packager
    would): only the model check can tell."""
    if onnx_bytes is not None:
        (pkg / "model.onnx").write_bytes(onnx_bytes)
    data = yaml.safe_load((pkg / "manifest.yaml").read_text())
    data.update(manifest)
    (pkg / "labels.txt").unlink()
    write_package(
        pkg,
        name=data["name"],
        version=data["version"],
        task=data["task"],
        model_file=data["model"],
        input_spec=data["input"],
        outputs=data["outputs"],
        decoder=data["decoder"],
        labels=["person", "car", "dog"],
    )


@pytest.fixture
def pkg(toy_models: dict[str, Path], tmp_path: Path) -> Path:
    dst = tmp_path / "pkg"
    shutil.copytree(toy_models["yolo"], dst)
    return dst


def _check(pkg: Path) -> None:
    p = load_package(pkg)  # hashes and manifest verify: the model file is the only problem
    check_model_file(p.root, p.manifest)


def test_real_models_pass_and_agree_with_onnx_runtime(toy_models: dict[str, Path], nanodet: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    for root in [nanodet, *toy_models.values()]:
        _check(root)
        inputs, outputs = read_graph_interface(root / "model.onnx")
        session = ort.InferenceSession(str(root / "model.onnx"), providers=["CPUExecutionProvider"])

        def ort_view(tensors: list[object]) -> list[tuple[str, tuple[int, ...], str]]:
            dtypes = {"tensor(float)": "float32"}
            return [
                (t.name, tuple(d if isinstance(d, int) and d > 0 else -1 for d in t.shape), dtypes[t.type])  # type: ignore[attr-defined]
                for t in tensors
            ]

        assert [(t.name, t.shape, t.dtype) for t in inputs] == ort_view(session.get_inputs()), root
        assert [(t.name, t.shape, t.dtype) for t in outputs] == ort_view(session.get_outputs()), root


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: random.Random(7).randbytes(40), "model.onnx is not a valid ONNX model"),
        (lambda data: b"\x0a\x7f random bytes that claim a long first field", "model.onnx is not a valid ONNX model"),
        (lambda data: b"PK\x03\x04 a zip file, not a model", "model.onnx is not a valid ONNX model"),
        (lambda data: data[: len(data) // 2], "model.onnx is truncated"),
        (lambda data: data[:-1], "model.onnx is truncated"),
        (lambda data: b"", "model.onnx is empty"),
        (lambda data: b"\x08\x08", "model.onnx is not a valid ONNX model: it has no graph"),
    ],
)
def test_a_model_file_that_is_not_onnx_is_refused_naming_file_and_reason(
    pkg: Path, damage: object, message: str
) -> None:
    _rewrite(pkg, damage((pkg / "model.onnx").read_bytes()))  # type: ignore[operator]
    with pytest.raises(ModelPackageError) as exc:
        _check(pkg)
    assert message in str(exc.value) and str(pkg) in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"input": {"name": "image", "shape": [-1, 3, 64, 64]}}, "manifest input is 'image', the model's is 'images'"),
        ({"input": {"name": "images", "shape": [-1, 3, 128, 128]}}, "the model's is [-1, 3, 64, 64]"),
        ({"input": {"name": "images", "shape": [-1, 3, 64, 64], "dtype": "uint8"}}, "the model's is float32"),
        ({"outputs": [{"name": "boxes", "shape": [-1, 7, 16]}]}, "manifest output 'boxes' is not a model output"),
        ({"outputs": [{"name": "output0", "shape": [-1, 84, 8400]}]}, "the model's is [-1, 7, 16]"),
    ],
)
def test_a_model_that_contradicts_its_manifest_is_refused(pkg: Path, changes: dict[str, object], message: str) -> None:
    _rewrite(pkg, **changes)
    with pytest.raises(ModelMismatchError) as exc:
        _check(pkg)
    assert message in str(exc.value) and f"{pkg}: model.onnx" in str(exc.value)


def _save(tmp_path: Path, graph: onnx.GraphProto, ir_version: int = 8) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = ir_version
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


def test_initializers_listed_as_inputs_are_not_inputs(tmp_path: Path) -> None:
    """Before IR version 4 exporters listed every weight among the graph inputs; ONNX Runtime skips them."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    init = numpy_helper.from_array(np.ones(4, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x, w], [y], [init])
    inputs, outputs = read_graph_interface(_save(tmp_path, graph, ir_version=3))
    assert [(i.name, i.shape) for i in inputs] == [("x", (-1, 4))]
    assert [(o.name, o.shape, o.dtype) for o in outputs] == [("y", (-1, 4), "float32")]


def test_a_model_with_two_inputs_or_none_is_refused(pkg: Path) -> None:
    a = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, 64, 64])
    b = helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["n", 3, 64, 64])
    y = helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["n", 3, 64, 64])
    graph = helper.make_graph([helper.make_node("Add", ["images", "extra"], ["output0"])], "g", [a, b], [y])
    _rewrite(pkg, _save(pkg.parent, graph).read_bytes())
    with pytest.raises(ModelMismatchError, match=r"one image input, it takes 2 \(images, extra\)"):
        _check(pkg)


def test_an_engine_file_is_left_to_the_agent(pkg: Path) -> None:
    (pkg / "model.onnx").rename(pkg / "model.engine")
    _rewrite(pkg, model="model.engine")
    _check(pkg)  # a TensorRT engine is not ONNX; the agent's TensorRT checks it


@settings(max_examples=int(os.environ.get("EDGEFLEET_FUZZ_EXAMPLES", "25")), deadline=None)
@given(data=st.binary(max_size=200), cut=st.integers(min_value=0, max_value=5000))
def test_any_bytes_are_read_or_refused_never_crash(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, cut: int
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "m.onnx"
    head = (Path(__file__).parents[3] / "models/nanodet-m/model.onnx").read_bytes()[:cut]
    for blob in (data, head + data):
        path.write_bytes(blob)
        with contextlib.suppress(ModelPackageError):  # read, or refused: never another exception
            read_graph_interface(path)
