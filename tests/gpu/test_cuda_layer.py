"""The CUDA layer: pinned memory, device arrays, zero-copy interop with CuPy and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_pinned_allocator_gives_page_locked_slots(gpu: str) -> None:
    from edgefleet.sdk._cuda._bindings import check, cudart
    from edgefleet.sdk._cuda._memory import mapped_device_pointer, pinned_allocator

    for upload in (False, True):
        a = pinned_allocator(gpu, upload=upload)((1080, 1920, 3))
        assert a.shape == (1080, 1920, 3) and a.dtype == np.uint8
        attrs = check(cudart().cudaPointerGetAttributes(a.ctypes.data), "attrs")
        assert attrs.type == cudart().cudaMemoryType.cudaMemoryTypeHost
        a[:] = 7  # writable from the host
        # by default the kernel reads the slot in place; with frame_upload (discrete GPUs) it is uploaded
        assert (mapped_device_pointer(a) is None) == upload


def test_frame_allocator_for_cuda_is_pinned(gpu: str) -> None:
    from edgefleet.sdk._cuda._memory import HostBlock
    from edgefleet.sdk._frames import FramePool, frame_allocator

    pool = FramePool((64, 64, 3), 3, frame_allocator(gpu))
    slot = pool.acquire(1.0)
    assert slot is not None
    base = slot.array
    while base is not None and not isinstance(base, HostBlock):
        base = base.base
    assert isinstance(base, HostBlock)


def test_device_array_roundtrip_and_views(gpu: str) -> None:
    from edgefleet.sdk._cuda._array import DeviceArray

    a = DeviceArray.zeros((4, 3, 5), np.float32, 0)
    host = np.arange(60, dtype=np.float32).reshape(4, 3, 5)
    a.copy_from_host(host)
    np.testing.assert_array_equal(a.copy_to_host(), host)
    np.testing.assert_array_equal(a[1:3].copy_to_host(), host[1:3])
    np.testing.assert_array_equal(a[2].copy_to_host(), host[2])


def test_cupy_interop_both_ways(gpu: str) -> None:
    cp = pytest.importorskip("cupy")
    from edgefleet.sdk._cuda._array import DeviceArray, as_device_array

    a = DeviceArray.zeros((8, 8), np.float32, 0)
    c = cp.asarray(a)  # through __cuda_array_interface__: no copy
    assert c.data.ptr == a.ptr
    c += 2
    cp.cuda.runtime.deviceSynchronize()
    assert float(a.copy_to_host().sum()) == 128.0
    d = cp.from_dlpack(a)  # through DLPack: no copy
    assert d.data.ptr == a.ptr
    src = cp.arange(12, dtype=cp.uint8).reshape(2, 2, 3)
    w = as_device_array(src)
    assert w.ptr == src.data.ptr and w.shape == (2, 2, 3)


def test_torch_interop_both_ways(gpu: str) -> None:
    torch = pytest.importorskip("torch")
    from edgefleet.sdk._cuda._array import DeviceArray, as_device_array

    a = DeviceArray.zeros((3, 4), np.float32, 0)
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.ptr and t.is_cuda
    t.add_(1)
    torch.cuda.synchronize()
    assert float(a.copy_to_host().sum()) == 12.0
    src = torch.ones((5, 6, 3), dtype=torch.uint8, device="cuda")
    w = as_device_array(src)  # CAI
    assert w.ptr == src.data_ptr()

    class OnlyDLPack:
        def __init__(self, t: object) -> None:
            self.t = t

        def __dlpack__(self, **kw: object) -> object:
            return self.t.__dlpack__()  # type: ignore[attr-defined]

        def __dlpack_device__(self) -> object:
            return self.t.__dlpack_device__()  # type: ignore[attr-defined]

    w2 = as_device_array(OnlyDLPack(src))
    assert w2.ptr == src.data_ptr() and w2.shape == (5, 6, 3)


def test_nvtx_range_is_harmless(gpu: str) -> None:
    from edgefleet.sdk._cuda._nvtx import nvtx_range

    with nvtx_range("test"):
        pass


@pytest.mark.parametrize("held", [True, False])
def test_enqueued_copies_memsets_and_launches_match_cuda_python(gpu: str, held: bool) -> None:
    """The GIL-keeping driver calls (``_enqueue``) do what cuda-python's do: copies both ways and pitched,
    a memset, a kernel launch; ``held`` is really taken on a machine with the driver."""
    from edgefleet.sdk._cuda import _enqueue as enqueue
    from edgefleet.sdk._cuda._array import DeviceArray
    from edgefleet.sdk._cuda._bindings import CudaError, Stream
    from edgefleet.sdk._cuda._memory import pinned_array
    from edgefleet.sdk._cuda._nvrtc import I32, PTR, kernel

    saved = enqueue.ENABLED
    enqueue.ENABLED = held
    try:
        s = Stream(0)  # makes the device's context current on this thread
        assert enqueue.held() == held  # the driver library loads on a GPU machine
        src = pinned_array((6, 40), np.uint8, ordinal=0)
        src[:] = np.arange(240, dtype=np.uint8).reshape(6, 40)
        dev = DeviceArray.empty((6, 64), np.uint8, 0)  # pitch 64
        enqueue.memset(dev.ptr, 0xAB, dev.nbytes, s.raw)
        enqueue.copy_2d(dev.ptr, 64, src.ctypes.data, 40, 40, 6, "h2d", s.raw)
        dev2 = DeviceArray.empty((6, 64), np.uint8, 0)
        enqueue.copy(dev2.ptr, dev.ptr, dev.nbytes, "d2d", s.raw)
        back = pinned_array((6, 64), np.uint8, ordinal=0)
        enqueue.copy(back.ctypes.data, dev2.ptr, back.nbytes, "d2h", s.raw)
        rows = pinned_array((6, 40), np.uint8, ordinal=0)
        enqueue.copy_2d(rows.ctypes.data, 40, dev2.ptr, 64, 40, 6, "d2h", s.raw)
        scores = DeviceArray.empty((2, 16), np.float32, 0)
        values = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
        scores.copy_from_host(values)
        out = DeviceArray.zeros((2, 2 * 3 + 2), np.float32, 0)
        kernel("ef_top_k_f32", 0).launch(
            (2, 1, 1), (256, 1, 1), [(scores.ptr, PTR), (out.ptr, PTR), (16, I32), (3, I32)], s.handle, 16 * 4
        )
        s.synchronize()
        np.testing.assert_array_equal(rows, src)
        np.testing.assert_array_equal(back[:, :40], src)
        assert (back[:, 40:] == 0xAB).all()
        top = out.copy_to_host()
        np.testing.assert_allclose(np.sort(top[:, :3], axis=1), np.sort(values, axis=1)[:, -3:], rtol=1e-6)
        idx = top[:, 3:6].view(np.int32)
        np.testing.assert_allclose(np.take_along_axis(values, idx, axis=1), top[:, :3], rtol=1e-6)
        if held:  # a driver error becomes one CudaError naming the call
            with pytest.raises(CudaError, match="D2H test failed: CUDA_ERROR_INVALID_VALUE"):
                enqueue._check(1, "D2H test")
    finally:
        enqueue.ENABLED = saved
