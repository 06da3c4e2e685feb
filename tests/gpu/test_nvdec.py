"""The NVDEC source on its own: every frame, the right size, pixels close to OpenCV's decode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_nvdec_decodes_every_frame_close_to_opencv(nvdec: str, clip: Path) -> None:
    import cv2

    from edgefleet.sdk._cuda._array import DeviceImage
    from edgefleet.sdk._cuda._nvdec import NvdecSource
    from edgefleet.sdk._sources import parse_source

    spec = parse_source(f"nvdec:{clip}")
    assert spec.kind == "nvdec" and not spec.live
    src = NvdecSource(spec)
    src.open()
    h, w = src.frame_shape()  # type: ignore[misc]
    alloc = src.frame_allocator(lambda s: np.empty(s, np.uint8))
    slot = alloc((h, w, 3))
    assert isinstance(slot, DeviceImage) and slot.fmt == "NV12"
    cap = cv2.VideoCapture(str(clip))
    n = 0
    diffs = []
    while True:
        img = src.read(slot)
        if img is None:
            break
        ok, ref = cap.read()
        assert ok
        if n % 50 == 0:
            diffs.append(float(np.abs(img.to_host().astype(np.int16) - ref.astype(np.int16)).mean()))
        n += 1
    src.close()
    assert n == 300
    assert src.copies == 300
    assert max(diffs) < 3.0, diffs  # same H.264 decode; colour conversion differs slightly


def test_nvdec_worker_process_gives_the_same_frames(nvdec: str, clip: Path) -> None:
    """``?process=1``: a worker process decodes into this process's slots (CUDA IPC), frame for frame the
    same bytes as the in-process source, with the same copy count; close() ends the worker."""
    from edgefleet.sdk._cuda._nvdec import NvdecSource
    from edgefleet.sdk._cuda._nvdec_process import NvdecProcessSource
    from edgefleet.sdk._sources import create_source, parse_source

    remote = create_source(parse_source(f"nvdec:{clip}?process=1"))
    local = create_source(parse_source(f"nvdec:{clip}"))
    assert isinstance(remote, NvdecProcessSource) and isinstance(local, NvdecSource)
    remote.open()
    local.open()
    assert remote.frame_shape() == local.frame_shape() and remote.nominal_fps() == local.nominal_fps()
    h, w = remote.frame_shape()  # type: ignore[misc]
    pool_r = [remote.frame_allocator(lambda s: np.empty(s, np.uint8))((h, w, 3)) for _ in range(3)]
    pool_l = local.frame_allocator(lambda s: np.empty(s, np.uint8))((h, w, 3))
    n = 0
    while True:
        a = remote.read(pool_r[n % 3])  # the slots take turns, as a pool's do
        b = local.read(pool_l)
        assert (a is None) == (b is None)
        if a is None:
            break
        if n % 37 == 0:
            assert np.array_equal(a.buffer.copy_to_host(), b.buffer.copy_to_host()), n
        n += 1
    assert n == 300 and remote.copies == local.copies == 300
    proc = remote._proc
    assert proc is not None and proc.poll() is None
    remote.close()
    local.close()
    assert proc.poll() == 0 and remote._proc is None


def test_nvdec_worker_that_dies_is_one_clear_error(nvdec: str, clip: Path) -> None:
    from edgefleet.sdk._errors import SourceError
    from edgefleet.sdk._sources import create_source, parse_source

    src = create_source(parse_source(f"nvdec:{clip}?process=1"))
    src.open()
    h, w = src.frame_shape()  # type: ignore[misc]
    slot = src.frame_allocator(lambda s: np.empty(s, np.uint8))((h, w, 3))
    assert src.read(slot) is slot
    src._proc.kill()  # type: ignore[attr-defined]
    with pytest.raises(SourceError, match="NVDEC worker exited"):
        src.read(slot)
    src.close()


def test_pipeline_with_nvdec_workers_loops_and_matches_in_process(
    ort_cuda: str, nvdec: str, clip: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two looping streams decoded in worker processes through a whole pipeline: every frame arrives,
    counted device to device, and the detections equal the in-process source's."""
    from edgefleet.sdk import Pipeline

    monkeypatch.chdir(repo)
    seen: dict[str, dict[tuple[str, int], list[str]]] = {}
    for name, opts in (("process", "?loop=1&process=1"), ("thread", "?loop=1")):
        got: dict[tuple[str, int], list[str]] = {}
        with Pipeline(
            "models/nanodet-m", [f"nvdec:{clip}{opts}"] * 2, device=ort_cuda, max_batch=8, max_frames=330
        ) as p:
            for r in p.results():
                got[(r.stream_id, r.sequence)] = sorted(d.label for d in r.detections)
        stats = p.stats()
        assert stats.results == 660, name
        counts = stats.copies["counts"]
        assert counts["device_to_device"] == 660 and counts["host_to_device"] == 0, name
        seen[name] = got
    assert seen["process"].keys() == seen["thread"].keys()
    same = sum(seen["process"][k] == seen["thread"][k] for k in seen["thread"])
    assert same >= 0.98 * len(seen["thread"])  # same pixels; batches may be made up differently
