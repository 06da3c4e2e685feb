"""Hardening of the agent's model store and the controller's registry against hostile packages, revoked
publisher keys and a full disk. Every refusal must leave nothing outside the staging folder."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from edgefleet.cloud._artifact_store import ArtifactStore
from edgefleet.cloud._errors import RegistryError
from edgefleet.cloud._pack import pack_package
from edgefleet.edge._errors import ArtifactError, DownloadInterruptedError
from edgefleet.edge._fetch import download
from edgefleet.edge._modelstore import ModelStore
from edgefleet.proto.v1 import agent_pb2
from edgefleet.sdk import generate_signing_key, load_public_key
from edgefleet.sdk._signing import key_id
from tests.support.onnx_models import identity_package


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("keys")
    out: dict[str, Any] = {}
    for name in ("old", "new"):
        generate_signing_key(d / f"{name}.pem", d / f"{name}.pub.pem")
        pub = load_public_key(d / f"{name}.pub.pem")
        out[name] = {"priv": d / f"{name}.pem", "pub": pub, "id": key_id(pub)}
    return out


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return identity_package(tmp_path_factory.mktemp("pkg") / "p")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _store(root: Path, keys: dict[str, Any], revoked: tuple[str, ...] = ()) -> ModelStore:
    trusted = {k["id"]: k["pub"] for k in keys.values()}
    return ModelStore(root / "state", trusted, revoked_keys=revoked)


def _assert_refused_cleanly(store: ModelStore, artifact: Path, match: str) -> None:
    before = _files(store.root.parent)
    with pytest.raises(ArtifactError, match=match):
        store.install(artifact, _sha(artifact), artifact.stat().st_size)
    assert _files(store.root.parent) == before  # nothing written anywhere
    assert not any(store.staging.iterdir()) and not any(store.models.iterdir())


# --- signing keys: rotation and revocation ---------------------------------------------------------
def test_rotation_and_revocation_of_publisher_keys(tmp_path: Path, keys: dict[str, Any], package: Path) -> None:
    old, _, _ = pack_package(package, tmp_path / "old.tar", key=keys["old"]["priv"])
    new, _, _ = pack_package(package, tmp_path / "new.tar", key=keys["new"]["priv"])
    # rotation: both keys trusted, both artifacts install
    store = _store(tmp_path / "a", keys)
    assert store.install(old, _sha(old), old.stat().st_size).signed_by == keys["old"]["id"]
    assert store.install(new, _sha(new), new.stat().st_size).signed_by == keys["new"]["id"]
    # revocation: the old key's artifacts are refused, naming the key; the new key's still install
    revoked = _store(tmp_path / "b", keys, revoked=(keys["old"]["id"],))
    _assert_refused_cleanly(revoked, old, f"key {keys['old']['id']}, which is revoked")
    assert revoked.install(new, _sha(new), new.stat().st_size).signed_by == keys["new"]["id"]
    # an already installed package signed by a revoked key is refused at (re)load too
    root = store.installed(_sha(old))
    assert root is not None
    again = ModelStore(store.root, store.trusted_keys, revoked_keys=(keys["old"]["id"],))
    with pytest.raises(ArtifactError, match="revoked"):
        again.load(root)
    # the controller's registry refuses it at push, naming the key
    reg = ArtifactStore(tmp_path / "registry")
    up = reg.begin(old.stat().st_size, _sha(old))
    up.write(old.read_bytes())
    up.finish()
    trusted = {k["id"]: k["pub"] for k in keys.values()}
    with pytest.raises(RegistryError, match=f"key {keys['old']['id']}, which is revoked"):
        reg.inspect(up, trusted, False, frozenset({keys["old"]["id"]}))
    up.discard()


# --- hostile archives --------------------------------------------------------------------------------
def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], *, gz: bool = False) -> Path:
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


HOSTILE = {
    "traversal": ([_file("p/manifest.yaml", b"x"), _file("../../evil.txt", b"pwned")], "outside the package"),
    "absolute": ([_file("/tmp/evil-edgefleet.txt", b"pwned")], "outside the package"),
    "symlink": ([_link("p/model.onnx", "/etc/passwd", tarfile.SYMTYPE)], "is a link"),
    "hardlink": ([_link("p/model.onnx", "/etc/passwd", tarfile.LNKTYPE)], "is a link"),
}


@pytest.mark.parametrize("case", ["traversal", "absolute", "symlink", "hardlink"])
def test_hostile_archive_members_are_refused_before_unpacking(tmp_path: Path, keys: dict[str, Any], case: str) -> None:
    members, match = HOSTILE[case]
    artifact = _tar(tmp_path / "bad.tar", members)  # type: ignore[arg-type]
    _assert_refused_cleanly(_store(tmp_path, keys), artifact, str(match))
    assert not (tmp_path.parent / "evil.txt").exists() and not Path("/tmp/evil-edgefleet.txt").exists()


def test_tar_bomb_declared_and_gzip_are_refused_without_inflating(tmp_path: Path, keys: dict[str, Any]) -> None:
    # a header declaring 1 GiB in a tiny file
    info = tarfile.TarInfo("p/model.onnx")
    info.size = 1 << 30
    declared = tmp_path / "declared.tar"
    declared.write_bytes(info.tobuf() + b"\0" * 1024)
    store = _store(tmp_path, keys)
    _assert_refused_cleanly(store, declared, "too large or a bomb")
    # a real gzip bomb: 300 MiB of zeros in a few hundred KiB
    bomb = tmp_path / "bomb.tar.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as gz:
        info = tarfile.TarInfo("p/zeros.bin")
        info.size = 300 << 20
        gz.write(info.tobuf())
        block = b"\0" * (1 << 20)
        for _ in range(300):
            gz.write(block)
    assert bomb.stat().st_size < 2 << 20
    _assert_refused_cleanly(store, bomb, "too large or a bomb")


def test_manifest_lying_about_sizes_and_hashes_is_refused(tmp_path: Path, keys: dict[str, Any], package: Path) -> None:
    art, _, _ = pack_package(package, tmp_path / "good.tar", key=keys["new"]["priv"])
    store = _store(tmp_path, keys)
    with tarfile.open(art) as src:
        members = [(m, src.extractfile(m).read() if m.isfile() else None) for m in src.getmembers()]  # type: ignore[union-attr]
    # the model file grows by one byte behind the manifest's back (size and hash now lie)
    lied = []
    for m, data in members:
        grown = data + b"\0" if data is not None and m.name.endswith(".onnx") else data
        if grown is not None:
            m.size = len(grown)
        lied.append((m, grown))
    _assert_refused_cleanly(store, _tar(tmp_path / "lie.tar", lied), "bytes, the manifest says")
    # an artifact whose own sha256 is not what the controller announced
    with pytest.raises(ArtifactError, match="corrupt"):
        store.install(art, "0" * 64, art.stat().st_size)


# --- disk full ---------------------------------------------------------------------------------------
@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "tmpfs"
    d.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], check=False)
    if res.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


class _Stub:
    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def FetchArtifact(self, req: Any, timeout: float) -> AsyncIterator[Any]:
        async def gen() -> AsyncIterator[Any]:
            for off in range(req.offset, len(self.blob), 64 * 1024):
                data = self.blob[off : off + 64 * 1024]
                yield agent_pb2.ArtifactChunk(offset=off, data=data, total_size=len(self.blob))

        return gen()


def test_disk_full_while_downloading_is_clear_and_resumes(tiny_disk: Path) -> None:
    blob = os.urandom(3 << 20)
    sha = hashlib.sha256(blob).hexdigest()
    dest = tiny_disk / "a.part"

    def fetch() -> int:
        return asyncio.run(download(_Stub(blob), sha256=sha, size=len(blob), dest=dest, device_id="d"))  # type: ignore[arg-type]

    with pytest.raises(DownloadInterruptedError, match=r"No space left on device.*resumes"):
        fetch()
    have = dest.read_bytes()
    assert 0 < len(have) < len(blob) and blob.startswith(have)  # a clean prefix, nothing corrupt
    subprocess.run(["mount", "-o", "remount,size=8m", str(tiny_disk)], check=True)  # space returns
    assert fetch() == len(have)  # resumed where it stopped
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha
