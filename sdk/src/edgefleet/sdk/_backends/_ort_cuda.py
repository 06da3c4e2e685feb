"""ONNX Runtime on device buffers: one IOBinding per input buffer, outputs preallocated on the device.

The preprocessing kernel writes into ``DeviceBinding.input``; :meth:`DeviceBinding.run` binds the input,
runs ORT on the backend's stream, and copies the outputs' first ``n`` rows to fresh host arrays (or, for a
detector whose candidate filter is on, only the candidates). By default every run uses the buffer's full
capacity (``pad_batch``): the CUDA EP re-plans its convolutions on every change of input shape (measured on
an H200, YOLOv8n at batch <= 8: 4.8 ms per run at one shape, 113 ms when the batch size varies). With CUDA
graphs every run also keeps the same addresses, one graph per buffer (``gpu_graph_id``).

Outputs whose ONNX shape has symbolic dimensions besides the batch (common in exported detectors) are
left to ORT on the first run; their real shape is then learned and they are preallocated and bound like
the others from the next run on (and given back to ORT for good if it ever rejects the bound shape).
Every device-to-host copy goes through ``cudaMemcpyAsync``, which releases the GIL while it waits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._cuda._array import DeviceArray
from .._cuda._nvrtc import F32, I32, PTR, kernel
from .._cuda._nvtx import nvtx_range
from .._cuda._runtime import check, cudart, use_device
from .._errors import BackendError

if TYPE_CHECKING:
    from ._onnxruntime import OnnxRuntimeBackend

__all__ = ["DeviceBinding"]


def _error(exc: Exception) -> BackendError:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return BackendError(f"ONNX Runtime inference failed: {msg}")


class DeviceBinding:
    def __init__(self, backend: OnnxRuntimeBackend, shape: tuple[int, ...], rows: int, graph_id: int) -> None:
        import onnxruntime as ort

        self.backend = backend
        self.ordinal = backend._ordinal
        use_device(self.ordinal)
        spec = backend.inputs[0]
        self.input = DeviceArray.zeros(shape, spec.dtype, self.ordinal)
        self.rows = rows
        self.io = backend._session.io_binding()
        self.bound_rows = -1
        self.outputs: dict[str, DeviceArray | None] = {}
        self._learn: set[str] = set()  # symbolic non-batch dims: learn the shape from ORT's first run
        self._dynamic: set[str] = set()  # ORT rejected a bound shape: it allocates these from now on
        for o in backend.outputs:
            dims = o.shape[1:]
            if o.shape and o.shape[0] in (-1, rows) and all(d > 0 for d in dims):
                self.outputs[o.name] = DeviceArray.empty((rows, *dims), o.dtype, self.ordinal)
            else:
                self.outputs[o.name] = None  # ORT allocates it until its shape is known
                if o.shape and o.shape[0] in (-1, rows):
                    self._learn.add(o.name)
        self.run_options = ort.RunOptions()
        self.graph_id = graph_id
        self.graphs = backend.config.cuda_graph and all(v is not None for v in self.outputs.values())
        if self.graphs:
            self.run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
        self._cand: tuple[DeviceArray, DeviceArray] | None = None
        self.candidate_counts: np.ndarray | None = None  # per frame, after a filtered run (tests, stats)

    def _bind(self, rows: int) -> None:
        b = self.backend
        spec = b.inputs[0]
        self.io.clear_binding_inputs()
        self.io.clear_binding_outputs()
        self.io.bind_input(
            spec.name,
            "cuda",
            self.ordinal,
            np.dtype(spec.dtype).type,
            (rows, *self.input.shape[1:]),
            self.input.ptr,
        )
        for o in b.outputs:
            arr = self.outputs[o.name]
            if arr is None:
                self.io.bind_output(o.name, "cuda", self.ordinal)
            else:
                self.io.bind_output(o.name, "cuda", self.ordinal, arr.dtype.type, (rows, *arr.shape[1:]), arr.ptr)
        self.bound_rows = rows

    def run(self, n: int) -> dict[str, np.ndarray]:
        b = self.backend
        if b._session is None:
            raise BackendError("backend is closed")
        if not 0 < n <= self.rows:
            raise BackendError(f"cannot run {n} rows from a buffer of {self.rows}")
        use_device(self.ordinal)
        rows = self.rows if (self.graphs or b.config.pad_batch) else (b.fixed_batch or n)
        if rows != self.bound_rows:
            self._bind(rows)
        with nvtx_range("infer.onnxruntime"):
            try:
                b._session.run_with_iobinding(self.io, self.run_options)
            except Exception as exc:  # ORT's pybind errors
                if not self._unlearn():
                    raise _error(exc) from None
                self._bind(rows)  # a learned output shape was wrong: let ORT allocate it, once more
                try:
                    b._session.run_with_iobinding(self.io, self.run_options)
                except Exception as exc2:
                    raise _error(exc2) from None
        with nvtx_range("infer.outputs"):
            return self._fetch(n, rows)

    def _unlearn(self) -> bool:
        learned = [name for name in self._learn if self.outputs[name] is not None]
        for name in learned:
            self.outputs[name] = None
            self._dynamic.add(name)
        self._learn.difference_update(learned)
        self.graphs = False
        return bool(learned)

    def _adopt(self, name: str, shape: tuple[int, ...], rows: int) -> None:
        """ORT told us an output's real shape: preallocate it at full capacity and bind it from now on."""
        if name not in self._learn or name in self._dynamic or not shape or shape[0] != rows:
            return
        if any(d <= 0 for d in shape[1:]):
            return
        spec = next(o for o in self.backend.outputs if o.name == name)
        self.outputs[name] = DeviceArray.empty((self.rows, *shape[1:]), spec.dtype, self.ordinal)
        self.bound_rows = -1  # rebind next run
        if self.backend.config.cuda_graph and all(v is not None for v in self.outputs.values()):
            self.graphs = True
            self.run_options.add_run_config_entry("gpu_graph_id", str(self.graph_id))

    def _fetch(self, n: int, rows: int) -> dict[str, np.ndarray]:
        rt = cudart()
        stream = self.backend._stream.raw
        d2h = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        result: dict[str, np.ndarray] = {}
        foreign: list[str] = [name for name, arr in self.outputs.items() if arr is None]
        values = self.io.get_outputs() if foreign else []
        names = [o.name for o in self.backend.outputs]
        for name in foreign:
            value = values[names.index(name)]
            shape = tuple(int(d) for d in value.shape())
            dtype = next(o.dtype for o in self.backend.outputs if o.name == name)
            host = np.empty((min(n, shape[0]) if shape else 0, *shape[1:]) if shape else (), dtype)
            if host.nbytes:
                check(
                    rt.cudaMemcpyAsync(host.ctypes.data, value.data_ptr(), host.nbytes, d2h, stream),
                    "cudaMemcpyAsync D2H",
                )
            result[name] = host
            self._adopt(name, shape, rows)
        cand = self.backend._candidates
        for name, arr in self.outputs.items():
            if name in result:
                continue
            if arr is None:
                continue
            if cand is not None and cand[0] == name:
                filtered = self._filter(arr, n, cand)
                if filtered is not None:
                    result[name] = filtered
                    continue
            host = np.empty((n, *arr.shape[1:]), arr.dtype)
            check(rt.cudaMemcpyAsync(host.ctypes.data, arr.ptr, host.nbytes, d2h, stream), "cudaMemcpyAsync D2H")
            result[name] = host
        check(rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        return {name: result[name] for name in self.outputs}

    def _filter(self, arr: DeviceArray, n: int, cand: tuple[str, int, float, int]) -> np.ndarray | None:
        """Threshold + compaction on the GPU; None when a frame overflowed (the caller copies it all)."""
        _, classes, threshold, k = cand
        rt = cudart()
        stream = self.backend._stream
        channels, anchors = arr.shape[1], arr.shape[2]
        if channels != 4 + classes or anchors <= k:
            return None  # not the layout the filter expects (or nothing to gain): the full tensor
        if self._cand is None:
            self._cand = (
                DeviceArray.empty((self.rows, channels, k), arr.dtype, self.ordinal),
                DeviceArray.empty((self.rows,), np.int32, self.ordinal),
            )
        out, count = self._cand
        check(rt.cudaMemsetAsync(count.ptr, 0, n * 4, stream.raw), "cudaMemsetAsync")
        name = "ef_candidates_f16" if arr.dtype == np.float16 else "ef_candidates_f32"
        kernel(name, self.ordinal).launch(
            ((anchors + 255) // 256, n, 1),
            (256, 1, 1),
            [
                (arr.ptr, PTR),
                (out.ptr, PTR),
                (count.ptr, PTR),
                (classes, I32),
                (anchors, I32),
                (k, I32),
                (threshold, F32),
            ],
            stream.handle,
        )
        counts = np.empty(n, np.int32)
        d2h = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        check(
            rt.cudaMemcpyAsync(counts.ctypes.data, count.ptr, counts.nbytes, d2h, stream.raw),
            "D2H counts",
        )
        stream.synchronize()
        most = int(counts.max(initial=0))
        if most > k:
            return None
        # only the columns some frame filled come back: (n, 4 + C, most) instead of (n, 4 + C, A)
        m = max(1, most)
        item = arr.dtype.itemsize
        host = np.empty((n, channels, m), arr.dtype)
        check(
            rt.cudaMemcpy2DAsync(
                host.ctypes.data, m * item, out.ptr, k * item, m * item, n * channels, d2h, stream.raw
            ),
            "D2H candidates",
        )
        stream.synchronize()
        for i, c in enumerate(counts):
            host[i, :, int(c) :] = 0  # past a frame's count: stale columns; zero scores fail any threshold
        self.candidate_counts = counts
        return host
