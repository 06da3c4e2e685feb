"""The CUDA layer (``edgefleet-sdk[cuda]``): devices, streams, events, pinned/mapped/device memory, array
interop (``__cuda_array_interface__`` and DLPack), NVTX ranges, the fused preprocessing kernel (NVRTC),
GPU candidate filtering; the pieces the NVDEC source (``_sources/_nvdec.py``) decodes into.

Nothing here is imported unless a pipeline runs on ``cuda:N``: ``cuda-python`` is loaded lazily by
:func:`edgefleet.sdk._cuda._bindings.cudart`, so ``edgefleet --help`` and CPU pipelines never touch it.
"""
