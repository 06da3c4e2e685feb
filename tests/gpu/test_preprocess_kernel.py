"""The fused preprocessing kernel against the CPU reference (CpuPreprocessor), all formats and layouts."""

from __future__ import annotations

import numpy as np
import pytest

from edgefleet.sdk._manifest import InputSpec

pytestmark = pytest.mark.gpu


def _spec(dtype: str, layout: str, color: str, resize: str, size: tuple[int, int] = (416, 320)) -> InputSpec:
    w, h = size
    shape = (-1, 3, h, w) if layout == "NCHW" else (-1, h, w, 3)
    return InputSpec(
        name="x",
        shape=shape,
        dtype=dtype,
        layout=layout,
        color=color,
        mean=(103.53, 116.28, 123.675),
        std=(57.375, 57.12, 58.395),
        resize=resize,
        pad_value=114,
    )


def _images(rng: np.random.Generator) -> list[np.ndarray]:
    sizes = [(768, 576), (1920, 1080), (333, 217), (200, 150), (416, 320), (64, 480)]
    out = []
    for w, h in sizes:
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * 255 // max(1, w - 1)), (yy * 255 // max(1, h - 1)), (xx + yy) % 256], -1)
        noise = rng.integers(0, 40, (h, w, 3))
        out.append(np.clip(base + noise, 0, 255).astype(np.uint8))
    return out


def _gpu_run(spec: InputSpec, device: str, frames: list[object]) -> np.ndarray:
    from edgefleet.sdk._backends import InputBuffer
    from edgefleet.sdk._cuda._array import DeviceArray
    from edgefleet.sdk._cuda._preprocess import GpuPreprocessor
    from edgefleet.sdk._metrics import CopyCounter

    n = len(frames)
    arr = DeviceArray.zeros((n, *spec.shape[1:]), spec.dtype, 0)
    buf = InputBuffer(arr, n, device)
    copies = CopyCounter()
    pre = GpuPreprocessor(spec, device, copies)
    for i, f in enumerate(frames):
        pre(f, buf, i)
    pre.finish(buf, n)
    from edgefleet.sdk._cuda._memory import mapped_device_pointer

    uploaded = sum(isinstance(f, np.ndarray) and mapped_device_pointer(f) is None for f in frames)
    assert copies.snapshot()["counts"]["host_to_device"] == uploaded
    return arr.copy_to_host()


def _cpu_run(spec: InputSpec, images: list[np.ndarray]) -> np.ndarray:
    from edgefleet.sdk._preprocess import CpuPreprocessor

    pre = CpuPreprocessor(spec)
    out = np.zeros((len(images), *spec.shape[1:]), spec.dtype)
    for i, img in enumerate(images):
        pre.write(img, out[i])
    return out


def _tolerance(spec: InputSpec, levels: float) -> float:
    if spec.dtype == "uint8":
        return levels
    tol = levels / min(spec.std) + 1e-4
    return tol + (0.01 if spec.dtype == "float16" else 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("color", ["BGR", "RGB"])
@pytest.mark.parametrize("resize", ["letterbox", "stretch", "center_crop"])
def test_kernel_matches_cpu_reference(gpu: str, dtype: str, layout: str, color: str, resize: str) -> None:
    rng = np.random.default_rng(0)
    images = _images(rng)
    spec = _spec(dtype, layout, color, resize)
    got = _gpu_run(spec, gpu, list(images)).astype(np.float32)
    want = _cpu_run(spec, images).astype(np.float32)
    diff = np.abs(got - want)
    assert diff.max() <= _tolerance(spec, 1.0), f"max diff {diff.max()} (mean {diff.mean():.2e})"
    # OpenCV's SIMD and scalar paths round differently in places: a few pixels may be one level off
    assert diff.mean() < _tolerance(spec, 0.1)


def test_kernel_reads_mapped_pinned_frames_in_place(gpu: str) -> None:
    """Frames in the pipeline's default pool slots (mapped pinned memory) are read by the kernel across
    PCIe where they are: no upload, and exactly the output of uploading them."""
    from edgefleet.sdk._cuda._memory import mapped_device_pointer, pinned_allocator

    rng = np.random.default_rng(3)
    images = _images(rng)
    alloc = pinned_allocator(gpu)
    slots = []
    for im in images:
        slot = alloc(im.shape)
        slot[...] = im
        assert mapped_device_pointer(slot) is not None
        slots.append(slot)
    for spec in (_spec("float32", "NCHW", "RGB", "letterbox"), _spec("float16", "NCHW", "BGR", "stretch")):
        np.testing.assert_array_equal(_gpu_run(spec, gpu, list(slots)), _gpu_run(spec, gpu, list(images)))


def test_kernel_reads_device_frames_without_uploads(gpu: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    images = _images(rng)[:3]
    spec = _spec("float32", "NCHW", "RGB", "letterbox")
    on_device = [torch.from_numpy(im).cuda() for im in images]
    torch.cuda.synchronize()
    got = _gpu_run(spec, gpu, on_device)
    want = _cpu_run(spec, images)
    assert np.abs(got - want).max() <= _tolerance(spec, 1.0)


def _to_nv12(bgr: np.ndarray) -> np.ndarray:
    import cv2

    h, w = bgr.shape[:2]
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
    y = i420[:h]
    u = i420[h : h + h // 4].reshape(h // 2, w // 2)
    v = i420[h + h // 4 :].reshape(h // 2, w // 2)
    uv = np.stack([u, v], -1).reshape(h // 2, w)
    return np.ascontiguousarray(np.concatenate([y, uv], 0))


@pytest.mark.parametrize("size", [(768, 576), (1920, 1080), (640, 360)])
def test_kernel_nv12_matches_opencv_conversion(gpu: str, size: tuple[int, int]) -> None:
    import cv2

    from edgefleet.sdk._cuda._array import DeviceArray, DeviceImage

    w, h = size
    rng = np.random.default_rng(2)
    bgr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    bgr = cv2.GaussianBlur(bgr, (5, 5), 0)
    nv12 = _to_nv12(bgr)
    dev = DeviceArray.empty(nv12.shape, np.uint8, 0)
    dev.copy_from_host(nv12)
    img = DeviceImage(dev, w, h, "NV12")
    reference = cv2.cvtColor(nv12, cv2.COLOR_YUV2BGR_NV12)
    np.testing.assert_array_equal(img.to_host(), reference)
    spec = _spec("float32", "NCHW", "BGR", "letterbox")
    got = _gpu_run(spec, gpu, [img])
    want = _cpu_run(spec, [reference])
    diff = np.abs(got - want)
    assert diff.max() <= _tolerance(spec, 2.0), f"max diff {diff.max()}"
    assert diff.mean() < _tolerance(spec, 0.1)
