"""Model packages: schema errors name the field, every file is checked, signatures verify."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest
import yaml

from edgefleet.sdk import (
    IntegrityError,
    ManifestError,
    ModelMismatchError,
    SignatureError,
    generate_signing_key,
    load_package,
    load_private_key,
    load_public_key,
    sign_manifest,
)
from edgefleet.sdk._model import load_model
from edgefleet.sdk._signing import key_id


@pytest.fixture
def pkg(toy_models: dict[str, Path], tmp_path: Path) -> Path:
    dst = tmp_path / "pkg"
    shutil.copytree(toy_models["yolo"], dst)
    return dst


def _edit(pkg: Path, **changes: object) -> None:
    data = yaml.safe_load((pkg / "manifest.yaml").read_text())
    data.update(changes)
    (pkg / "manifest.yaml").write_text(yaml.safe_dump(data))


def test_loads_and_verifies(pkg: Path) -> None:
    p = load_package(pkg)
    assert p.ref == "toy-yolo:1.0.0"
    assert p.labels == ("person", "car", "dog")


def test_real_nanodet_package_verifies(nanodet: Path) -> None:
    p = load_package(nanodet)
    assert p.manifest.task == "detection"
    assert len(p.labels) == 80 and p.labels[0] == "person"


def test_missing_path_is_clear(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such model package"):
        load_package(tmp_path / "nope")


def test_folder_without_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no manifest.yaml"):
        load_package(tmp_path)


def test_invalid_yaml(pkg: Path) -> None:
    (pkg / "manifest.yaml").write_text("name: [unclosed")
    with pytest.raises(ManifestError, match="not valid YAML"):
        load_package(pkg)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"version": "1.0"}, "version"),
        ({"name": "Bad Name"}, "name"),
        ({"task": "segmentation"}, "task"),
        ({"unknown_key": 1}, "unknown_key"),
        ({"model": "../escape.onnx"}, "model"),
        ({"labels": "missing.txt"}, "labels refers to 'missing.txt'"),
        ({"task": "classification"}, "task 'classification' does not match decoder 'yolo', which does detection"),
    ],
)
def test_schema_errors_name_the_field(pkg: Path, change: dict[str, object], needle: str) -> None:
    _edit(pkg, **change)
    with pytest.raises(ManifestError) as exc:
        load_package(pkg)
    assert needle in str(exc.value)
    assert str(pkg / "manifest.yaml") in str(exc.value)


def test_corrupt_file_is_refused_naming_it(pkg: Path) -> None:
    data = bytearray((pkg / "model.onnx").read_bytes())
    data[100] ^= 0xFF
    (pkg / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=r"model\.onnx sha256"):
        load_package(pkg)


def test_truncated_file_is_refused(pkg: Path) -> None:
    data = (pkg / "model.onnx").read_bytes()
    (pkg / "model.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(IntegrityError, match="truncated"):
        load_package(pkg)


def test_missing_file_is_refused(pkg: Path) -> None:
    (pkg / "labels.txt").unlink()
    with pytest.raises(IntegrityError, match="labels.txt is listed in the manifest but missing"):
        load_package(pkg)


def test_symlinked_file_is_refused(pkg: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    shutil.move(pkg / "labels.txt", outside)
    (pkg / "labels.txt").symlink_to(outside)
    with pytest.raises(IntegrityError):
        load_package(pkg)


def test_tar_package_loads(pkg: Path, tmp_path: Path) -> None:
    archive = tmp_path / "pkg.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(pkg, arcname="toy")
    p = load_package(archive, unpack_dir=tmp_path / "unpacked")
    assert p.ref == "toy-yolo:1.0.0"
    assert p.root.is_relative_to(tmp_path / "unpacked")


def test_a_tar_unpacked_to_a_temporary_folder_leaves_nothing_behind(pkg: Path, tmp_path: Path) -> None:
    """`models inspect pkg.tar` left a copy of the package in /tmp at every call."""
    import gc

    archive = tmp_path / "pkg.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(pkg, arcname="toy")
    p = load_package(archive)
    scratch = p.root.parent
    assert scratch.name.startswith("edgefleet-pkg-") and (p.root / "manifest.yaml").is_file()
    del p
    gc.collect()
    assert not scratch.exists(), "the unpacked copy outlived the package"
    (pkg / "model.onnx").write_bytes(b"corrupt")
    with tarfile.open(archive, "w") as tar:
        tar.add(pkg, arcname="toy")
    before = set(Path(tempfile.gettempdir()).glob("edgefleet-pkg-*"))
    with pytest.raises(IntegrityError):
        load_package(archive)
    assert set(Path(tempfile.gettempdir()).glob("edgefleet-pkg-*")) == before, "a refused package left its copy"


def test_tar_with_link_is_refused(pkg: Path, tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar"
    (tmp_path / "link").symlink_to("/etc/passwd")
    with tarfile.open(archive, "w") as tar:
        tar.add(pkg, arcname="toy")
        tar.add(tmp_path / "link", arcname="toy/link")
    with pytest.raises(IntegrityError, match="is a link"):
        load_package(archive, unpack_dir=tmp_path / "out")


def test_shape_mismatch_is_refused_naming_both(pkg: Path) -> None:
    from tests.support.onnx_models import write_package

    data = yaml.safe_load((pkg / "manifest.yaml").read_text())
    data["input"]["shape"] = [-1, 3, 128, 128]
    write_package(
        pkg,
        name=data["name"],
        version=data["version"],
        task=data["task"],
        input_spec=data["input"],
        outputs=data["outputs"],
        decoder=data["decoder"],
        labels=["person", "car", "dog"],
    )
    with pytest.raises(ModelMismatchError) as exc:
        load_model(load_package(pkg))
    assert "[-1, 3, 128, 128]" in str(exc.value) and "[-1, 3, 64, 64]" in str(exc.value)


def test_corrupt_onnx_with_matching_hash_is_a_clear_backend_error(pkg: Path) -> None:
    from edgefleet.sdk import BackendError
    from tests.support.onnx_models import write_package

    (pkg / "model.onnx").write_bytes(b"not a model at all")
    data = yaml.safe_load((pkg / "manifest.yaml").read_text())
    write_package(
        pkg,
        name=data["name"],
        version=data["version"],
        task=data["task"],
        input_spec=data["input"],
        outputs=data["outputs"],
        decoder=data["decoder"],
        labels=["person", "car", "dog"],
    )
    with pytest.raises(BackendError, match="cannot load this model"):
        load_model(load_package(pkg))


def test_signature_roundtrip_and_tamper(pkg: Path, tmp_path: Path) -> None:
    kid = generate_signing_key(tmp_path / "k.pem", tmp_path / "k.pub")
    assert (tmp_path / "k.pem").stat().st_mode & 0o777 == 0o600
    pub = load_public_key(tmp_path / "k.pub")
    assert key_id(pub) == kid
    manifest = load_package(pkg).manifest
    signed = sign_manifest(manifest, load_private_key(tmp_path / "k.pem"))
    (pkg / "manifest.yaml").write_text(yaml.safe_dump(signed.model_dump(mode="json", exclude_none=True)))
    assert load_package(pkg, trusted_keys={kid: pub}, require_signature=True).signed_by == kid
    # an untrusted key
    other = generate_signing_key(tmp_path / "o.pem", tmp_path / "o.pub")
    with pytest.raises(SignatureError, match=f"signed by key {kid}, which is not trusted"):
        load_package(pkg, trusted_keys={other: load_public_key(tmp_path / "o.pub")})
    # tampering with any signed field breaks the signature
    _edit(pkg, description="tampered")
    with pytest.raises(SignatureError, match="does not verify"):
        load_package(pkg, trusted_keys={kid: pub})


def test_unsigned_refused_when_required(pkg: Path) -> None:
    with pytest.raises(SignatureError, match="not signed"):
        load_package(pkg, require_signature=True)
