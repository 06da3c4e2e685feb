"""The NVDEC source on its own: every frame, the right size, pixels close to OpenCV's decode; the
prefetching decoder gives the same frames as the one on the source's thread, and loops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _open(clip: Path, query: str = "") -> tuple[Any, Any]:
    from edgefleet.sdk._cuda._array import DeviceImage
    from edgefleet.sdk._sources import parse_source
    from edgefleet.sdk._sources._nvdec import NvdecSource

    spec = parse_source(f"nvdec:{clip}{query}")
    assert spec.kind == "nvdec" and not spec.live
    src = NvdecSource(spec)
    src.open()
    h, w = src.frame_shape()  # type: ignore[misc]
    slot = src.frame_allocator(lambda s: np.empty(s, np.uint8))((h, w, 3))
    assert isinstance(slot, DeviceImage) and slot.fmt == "NV12"
    return src, slot


def _digests(src: Any, slot: Any, limit: int) -> list[int]:
    out = []
    while len(out) < limit:
        img = src.read(slot)
        if img is None:
            break
        out.append(hash(img.buffer.copy_to_host().tobytes()))
    return out


@pytest.mark.parametrize("query", ["?prefetch=4", ""], ids=["prefetch", "on-thread"])
def test_nvdec_decodes_every_frame_close_to_opencv(nvdec: str, clip: Path, query: str) -> None:
    import cv2

    src, slot = _open(clip, query)
    assert (src._threaded is not None) == (query != "")
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


def test_prefetching_decoder_gives_the_same_frames_and_loops(nvdec: str, clip: Path) -> None:
    on_thread, slot = _open(clip)
    expected = _digests(on_thread, slot, 300)
    on_thread.close()
    assert len(expected) == 300 and len(set(expected)) > 250  # the clip moves: frames differ

    src, slot = _open(clip, "?prefetch=2&loop=1")
    got = _digests(src, slot, 650)  # past the end, rewound, 50 more
    src.close()
    assert got[:300] == expected
    assert got[300:600] == expected
    assert got[600:] == expected[:50]
