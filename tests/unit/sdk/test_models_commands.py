"""``edgefleet models init|bump|pack|verify`` as a user runs them (real subprocesses), on the committed
NanoDet model and small in-process ONNX files (Ultralytics metadata written the way Ultralytics writes
it). The real Ultralytics exports are tests/integration/test_ultralytics_exports.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml

from edgefleet.sdk import Pipeline, load_package
from tests.support.onnx_models import constant_head_model, yolo_const

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def _ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stderr
    return res.stdout


def _one_line_error(res: subprocess.CompletedProcess[str], text: str) -> None:
    assert res.returncode != 0, res.stdout
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert text in res.stderr, res.stderr


def _with_metadata(path: Path, **meta: str) -> Path:
    model = onnx.load(str(path))
    for k, v in meta.items():
        model.metadata_props.add(key=k, value=v)
    onnx.save(model, str(path))
    return path


def test_init_turns_the_nanodet_onnx_into_a_package_that_runs(nanodet: Path, clip: Path, tmp_path: Path) -> None:
    onnx_file = shutil.copy(nanodet / "model.onnx", tmp_path / "nanodet-m.onnx")
    out = _ok(_cli("models", "init", str(onnx_file), "--labels", str(nanodet / "labels.txt"), cwd=tmp_path))
    assert "a NanoDet-style GFL head: strides [8, 16, 32], reg_max 10" in out
    assert "confirm" in out and "loaded and run once in ONNX Runtime" in out
    pkg = load_package(tmp_path / "nanodet-m")  # every file's sha256 and size are right
    m = pkg.manifest
    assert (m.name, m.version, m.task, m.decoder.type) == ("nanodet-m", "1.0.0", "detection", "nanodet")
    assert set(m.files) == {"nanodet-m.onnx", "labels.txt"} and len(pkg.labels) == 80
    assert m.input.color == "BGR" and m.input.mean == (103.53, 116.28, 123.675)  # NanoDet's own, to confirm
    with Pipeline(tmp_path / "nanodet-m", [str(clip)], max_frames=3) as p:
        people = [d for r in p.results() for d in r.detections if d.label == "person"]
    assert len(people) >= 3


def test_init_reads_ultralytics_metadata(tmp_path: Path) -> None:
    """What Ultralytics writes into metadata_props: names, imgsz, stride, task, batch."""
    const = yolo_const(3, [(32, 32, 16, 16, 1, 0.9)])
    constant_head_model(tmp_path / "best.onnx", const, size=64, dynamic_batch=False)
    _with_metadata(
        tmp_path / "best.onnx",
        description="Ultralytics YOLO11n model trained on parts.yaml",
        author="Ultralytics",
        stride="32",
        task="detect",
        batch="1",
        imgsz="[64, 64]",
        names="{0: 'bolt', 1: 'nut', 2: 'washer'}",
    )
    out = _ok(_cli("models", "init", str(tmp_path / "best.onnx"), "--name", "parts", cwd=tmp_path))
    assert "an Ultralytics detect export" in out and "3 class names (bolt, nut, washer)" in out
    pkg = load_package(tmp_path / "parts")
    i = pkg.manifest.input
    assert pkg.labels == ("bolt", "nut", "washer")
    assert (i.color, i.mean, i.std, i.resize, i.pad_value) == ("RGB", (0, 0, 0), (255, 255, 255), "letterbox", 114)
    assert pkg.manifest.decoder.params() == {}  # Ultralytics' defaults are the yolo decoder's
    with Pipeline(pkg, ["synthetic:?frames=1&width=64&height=64&live=false"]) as p:
        (r,) = list(p.results())
    assert [d.label for d in r.detections] == ["nut"]


def test_init_recognises_a_yolo_head_by_its_shape(tmp_path: Path) -> None:
    const = yolo_const(3, [(32, 32, 16, 16, 2, 0.9)], anchors=48)
    constant_head_model(tmp_path / "det.onnx", const, size=64)
    out = _ok(_cli("models", "init", str(tmp_path / "det.onnx"), cwd=tmp_path))
    assert "a YOLO detection head: output0 (N, 4 + C, anchors) with 3 class scores" in out
    assert load_package(tmp_path / "det").manifest.decoder.type == "yolo"


def test_init_needs_the_size_of_a_dynamic_input(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, "h", "w"])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "any.onnx"))
    _one_line_error(_cli("models", "init", str(tmp_path / "any.onnx"), cwd=tmp_path), "give it with --imgsz")
    out = _ok(_cli("models", "init", str(tmp_path / "any.onnx"), "--imgsz", "48x64", cwd=tmp_path))
    assert "fit no built-in decoder: decoder raw" in out
    m = load_package(tmp_path / "any").manifest
    assert list(m.input.shape) == [-1, 3, 48, 64] and list(m.outputs[0].shape) == [-1, 3, 48, 64]  # dry run


def test_init_refuses_what_it_cannot_package(tmp_path: Path, nanodet: Path) -> None:
    (tmp_path / "notes.onnx").write_text("not a model")
    _one_line_error(_cli("models", "init", str(tmp_path / "notes.onnx")), "not a valid ONNX model")
    shutil.copy(nanodet / "model.onnx", tmp_path / "m.onnx")
    _ok(_cli("models", "init", str(tmp_path / "m.onnx"), cwd=tmp_path))
    _one_line_error(_cli("models", "init", str(tmp_path / "m.onnx"), cwd=tmp_path), "exists; choose another --out")
    _ok(_cli("models", "init", str(tmp_path / "m.onnx"), "--force", "--version", "2.0.0", cwd=tmp_path))
    assert load_package(tmp_path / "m").version == "2.0.0"
    _one_line_error(_cli("models", "init", str(tmp_path / "m.onnx"), "--name", "Bad Name"), "must match")


def _package(nanodet: Path, tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    shutil.copytree(nanodet, pkg)
    return pkg


def test_bump_records_changed_files_and_keeps_comments(nanodet: Path, tmp_path: Path) -> None:
    pkg = _package(nanodet, tmp_path)
    (pkg / "labels.txt").write_text((pkg / "labels.txt").read_text().replace("person", "pedestrian"))
    _one_line_error(_cli("models", "verify", str(pkg)), "labels.txt")  # the edit broke its recorded sha256
    out = _ok(_cli("models", "bump", str(pkg), "--minor"))
    assert "1.0.0 -> 1.1.0 (labels.txt)" in out
    text = (pkg / "manifest.yaml").read_text()
    assert text.startswith("# Generated by tools/models/build_nanodet.sh")  # the user's comments stay
    loaded = load_package(pkg)
    assert loaded.version == "1.1.0" and loaded.labels[0] == "pedestrian"
    assert "1.1.0 -> 1.1.1 (no file changed)" in _ok(_cli("models", "bump", str(pkg), "--patch"))
    assert "1.1.1 -> 2.0.0" in _ok(_cli("models", "bump", str(pkg), "--major"))
    assert "2.0.0 -> 2.0.0" in _ok(_cli("models", "bump", str(pkg), "--files"))
    _one_line_error(_cli("models", "bump", str(pkg), "--major", "--minor"), "exactly one of")


def test_pack_signs_and_verify_checks_the_signature(nanodet: Path, tmp_path: Path) -> None:
    pkg = _package(nanodet, tmp_path)
    _ok(_cli("keys", "generate", "--name", "pub", "--out-dir", str(tmp_path)))
    _ok(_cli("keys", "generate", "--name", "other", "--out-dir", str(tmp_path)))
    out = _ok(_cli("models", "pack", str(pkg), "--key", str(tmp_path / "pub.pem"), "--out", str(tmp_path / "a.tar")))
    assert "signed with" in out
    out = _ok(_cli("models", "verify", str(tmp_path / "a.tar"), "--trusted-key", str(tmp_path / "pub.pub.pem")))
    assert "nanodet-m:1.0.0 verifies" in out and "signed by key" in out and "loaded and run" in out
    _one_line_error(
        _cli("models", "verify", str(tmp_path / "a.tar"), "--trusted-key", str(tmp_path / "other.pub.pem")), "key"
    )
    # the tar is reproducible: the same package packs to the same bytes
    _ok(_cli("models", "pack", str(pkg), "--key", str(tmp_path / "pub.pem"), "--out", str(tmp_path / "b.tar")))
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    assert "nanodet-m-1.0.0.tar" in _ok(_cli("models", "pack", str(pkg), cwd=tmp_path))


def test_bump_removes_a_signature_the_new_manifest_breaks(nanodet: Path, tmp_path: Path) -> None:
    from edgefleet.sdk import generate_signing_key, load_private_key, sign_manifest

    pkg = _package(nanodet, tmp_path)
    generate_signing_key(tmp_path / "k.pem", tmp_path / "k.pub.pem")
    signed = sign_manifest(load_package(pkg).manifest, load_private_key(tmp_path / "k.pem"))
    data = yaml.safe_load((pkg / "manifest.yaml").read_text())
    data["signature"] = signed.model_dump(mode="json")["signature"]
    (pkg / "manifest.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    out = _ok(_cli("models", "bump", str(pkg), "--patch"))
    assert "the signature was removed" in out
    assert load_package(pkg).manifest.signature is None


def test_pack_refuses_a_decoder_that_does_not_fit(nanodet: Path, tmp_path: Path) -> None:
    pkg = _package(nanodet, tmp_path)
    text = (pkg / "manifest.yaml").read_text().replace("reg_max: 10", "reg_max: 7")
    (pkg / "manifest.yaml").write_text(text)
    _one_line_error(_cli("models", "pack", str(pkg), "--out", str(tmp_path / "x.tar")), "reg_max 7 needs 4 x 8 = 32")
    assert not (tmp_path / "x.tar").exists()


@pytest.mark.parametrize("size", ["0", "x4", "3x0"])
def test_bad_imgsz_is_one_line(tmp_path: Path, nanodet: Path, size: str) -> None:
    _one_line_error(_cli("models", "init", str(nanodet / "model.onnx"), "--imgsz", size), "--imgsz")


def test_manifest_files_table_matches_the_files(nanodet: Path, tmp_path: Path) -> None:
    onnx_file = shutil.copy(nanodet / "model.onnx", tmp_path / "x.onnx")
    _ok(_cli("models", "init", str(onnx_file), cwd=tmp_path))
    pkg = load_package(tmp_path / "x")
    import hashlib

    for name, entry in pkg.manifest.files.items():
        data = (pkg.root / name).read_bytes()
        assert (entry.sha256, entry.size) == (hashlib.sha256(data).hexdigest(), len(data))
    assert np.isfinite(pkg.manifest.input.std).all()
