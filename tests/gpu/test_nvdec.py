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
