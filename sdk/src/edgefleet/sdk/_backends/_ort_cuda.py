"""ONNX Runtime on device buffers: one IOBinding per input buffer (and lane), outputs preallocated on the
device.

The preprocessing kernel writes into ``DeviceBinding.input``; :meth:`DeviceBinding.run` binds the input,
runs ORT on the calling worker's lane (its session and CUDA stream), and copies the outputs' first ``n``
rows to fresh host arrays (or, for a detector whose candidate filter is on, only the candidates; for a
classifier, only each row's top k). By
default every run uses the buffer's full capacity (``pad_batch``): the CUDA EP re-plans its convolutions on
every change of input shape (measured on an H200, YOLOv8n at batch <= 8: 4.8 ms per run at one shape,
113 ms when the batch size varies). With CUDA graphs every run also keeps the same addresses, one graph
per buffer (``gpu_graph_id``) in each lane's session; a model with an output of unknown shape runs without
graphs (the backend says so when it loads).

Outputs whose ONNX shape has symbolic dimensions besides the batch (common in exported detectors) are
left to ORT on the first run; their real shape is then learned and they are preallocated and bound like
the others from the next run on (and given back to ORT for good if it ever rejects the bound shape).
Every device-to-host copy of a whole output goes through ``cudaMemcpyAsync``, which releases the GIL
while it waits. The small results of the GPU filters (counts, candidates, top k) go into pinned staging
buffers instead, so their copies are queued and return at once, and are read after one stream
synchronisation (copies into pageable memory each wait for the stream).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._cuda import _enqueue as enqueue
from .._cuda._array import DeviceArray
from .._cuda._bindings import check, cudart, use_device
from .._cuda._memory import pinned_array
from .._cuda._nvrtc import F32, I32, PTR, kernel
from .._cuda._nvtx import nvtx_range
from .._errors import BackendError
from .._sparse import BoxCandidates, CandidateFilter, CandidateRows, ConsumedOutput, TopK
from ._base import TensorSpec
from ._configs import OnnxRuntimeConfig

__all__ = ["GFL_NMS_MAX", "TOP_K_MAX", "TOP_K_MAX_COLUMNS", "DeviceBinding", "Lane", "SessionHost"]

TOP_K_MAX = 64  # k rounds of a block-wide arg-max: fine for a handful, not for hundreds
TOP_K_MAX_COLUMNS = 12_000  # the row is held in shared memory (48 KiB without opting in to more)


@dataclass(frozen=True)
class Lane:
    """One ORT session and the CUDA stream it runs on (one per inference worker)."""

    index: int
    session: Any
    stream: Any  # edgefleet.sdk._cuda._bindings.Stream


class SessionHost(Protocol):
    """What a binding reads of the ONNX Runtime backend that owns it (``OnnxRuntimeBackend``)."""

    config: OnnxRuntimeConfig
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    _session: Any
    _ordinal: int
    _graphs: bool
    _candidates: dict[str, CandidateFilter]

    @property
    def fixed_batch(self) -> int | None: ...

    def lane(self) -> Lane: ...


def _error(exc: Exception) -> BackendError:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return BackendError(f"ONNX Runtime inference failed: {msg}")


class DeviceBinding:
    def __init__(self, backend: SessionHost, shape: tuple[int, ...], rows: int, graph_id: int) -> None:
        import onnxruntime as ort

        self.backend = backend
        self.ordinal = backend._ordinal
        use_device(self.ordinal)
        spec = backend.inputs[0]
        self.input = DeviceArray.zeros(shape, spec.dtype, self.ordinal)
        self.rows = rows
        self._io: dict[int, Any] = {}  # lane index -> IOBinding
        self.bound: dict[int, int] = {}  # lane index -> rows bound now (tests read it)
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
        self.graphs = (
            backend.config.cuda_graph and backend._graphs and all(v is not None for v in self.outputs.values())
        )
        if self.graphs:
            self.run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
        self._cand: dict[str, tuple[DeviceArray, ...]] = {}
        self._top: dict[str, DeviceArray] = {}  # top-k results, packed
        self._staging: dict[str, np.ndarray] = {}  # pinned host buffers for the filters' results
        self._counts: DeviceArray | None = None  # (filters, rows) candidate counts of the last run
        self.candidate_counts: np.ndarray | None = None  # per frame, after a filtered run (tests, stats)

    def _bind(self, lane: Lane, rows: int) -> Any:
        b = self.backend
        spec = b.inputs[0]
        io = self._io.get(lane.index)
        if io is None:
            io = self._io[lane.index] = lane.session.io_binding()
        io.clear_binding_inputs()
        io.clear_binding_outputs()
        io.bind_input(
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
                io.bind_output(o.name, "cuda", self.ordinal)
            else:
                io.bind_output(o.name, "cuda", self.ordinal, arr.dtype.type, (rows, *arr.shape[1:]), arr.ptr)
        self.bound[lane.index] = rows
        return io

    def run(self, n: int, lane: Lane | None = None) -> dict[str, np.ndarray]:
        """Run rows [0, n) on ``lane`` (default: the calling thread's)."""
        b = self.backend
        if b._session is None:
            raise BackendError("backend is closed")
        if not 0 < n <= self.rows:
            raise BackendError(f"cannot run {n} rows from a buffer of {self.rows}")
        use_device(self.ordinal)
        lane = lane or b.lane()
        rows = self.rows if (self.graphs or b.config.pad_batch) else (b.fixed_batch or n)
        io = self._io[lane.index] if self.bound.get(lane.index, -1) == rows else self._bind(lane, rows)
        with nvtx_range("infer.onnxruntime"):
            try:
                lane.session.run_with_iobinding(io, self.run_options)
            except Exception as exc:  # ORT's pybind errors
                if not self._unlearn():
                    raise _error(exc) from None
                io = self._bind(lane, rows)  # a learned output shape was wrong: let ORT allocate it, once more
                try:
                    lane.session.run_with_iobinding(io, self.run_options)
                except Exception as exc2:
                    raise _error(exc2) from None
        with nvtx_range("infer.outputs"):
            return self._fetch(io, lane, n, rows)

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
        self.bound.clear()  # rebind next run, every lane (CUDA graphs stay off: see OnnxRuntimeBackend.load)

    def _fetch(self, io: Any, lane: Lane, n: int, rows: int) -> dict[str, np.ndarray]:
        rt = cudart()
        stream = lane.stream.raw
        d2h = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        result: dict[str, Any] = {}  # ndarrays, or CandidateRows where a filter engaged
        foreign: list[str] = [name for name, arr in self.outputs.items() if arr is None]
        values = io.get_outputs() if foreign else []
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
        filters = [f for f in self.backend._candidates.values() if f.output not in result]
        tops = [t for t in (self._top_k(f) for f in filters if f.layout == "top_k") if t is not None]
        for t in tops:
            t.queue(n, lane.stream, self._pinned(f"top:{t.f.output}", n * (2 * t.f.k + 2) * 4))
        fetches = self._filter([f for f in filters if f.layout != "top_k"], n, lane)
        covered = {name for fetch in fetches for name in fetch.names()} | {t.f.output for t in tops}
        for name, arr in self.outputs.items():
            if name in result or name in covered or arr is None:
                continue
            host = np.empty((n, *arr.shape[1:]), arr.dtype)
            check(rt.cudaMemcpyAsync(host.ctypes.data, arr.ptr, host.nbytes, d2h, stream), "cudaMemcpyAsync D2H")
            result[name] = host
        check(rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        for fetch in fetches:
            result.update(fetch.finish())
        for t in tops:
            result[t.f.output] = t.finish()
        return {name: result[name] for name in self.outputs}

    def _pinned(self, key: str, nbytes: int) -> np.ndarray:
        """A reused pinned host buffer of at least ``nbytes`` (flat uint8) for ``key``."""
        buf = self._staging.get(key)
        if buf is None or buf.nbytes < nbytes:
            buf = self._staging[key] = pinned_array((max(1, nbytes),), np.uint8, ordinal=self.ordinal)
        return buf

    def _top_k(self, f: CandidateFilter) -> _TopKPlan | None:
        arr = self.outputs.get(f.output)
        if arr is None or arr.ndim < 2:
            return None
        columns = int(np.prod(arr.shape[1:]))
        if not 0 < f.k <= min(TOP_K_MAX, columns) or columns > TOP_K_MAX_COLUMNS:
            return None
        out = self._top.get(f.output)
        if out is None:
            out = self._top[f.output] = DeviceArray.empty((self.rows, 2 * f.k + 2), np.float32, self.ordinal)
        return _TopKPlan(f, arr, columns, out, self.ordinal)

    def _filter(self, filters: list[CandidateFilter], n: int, lane: Lane) -> list[_Fetch | _GflFetch]:
        """Threshold + compaction on the GPU: every filter's kernel, one copy of all counts, one wait,
        then the candidates' copies are queued (the caller waits once more for them and the other
        outputs). A filter that does not apply to this run (an output not bound yet, another layout, a
        frame with more than ``capacity`` candidates) is left out: its tensors are copied whole."""
        plans: list[_Plan | _GflPlan] = [p for p in (self._plan(f) for f in filters if f.layout != "gfl") if p]
        gfl = self._gfl([f for f in filters if f.layout == "gfl"])
        if gfl is not None:
            plans.append(gfl)
        if not plans:
            return []
        stream = lane.stream
        total = sum(p.count_rows for p in plans)
        if self._counts is None or self._counts.shape[0] < total:
            self._counts = DeviceArray.empty((total, self.rows), np.int32, self.ordinal)
        counts_dev = self._counts
        size = total * self.rows * 4
        enqueue.memset(counts_dev.ptr, 0, size, stream.raw, "cudaMemsetAsync (candidate counts)")
        first_rows = []
        row = 0
        for plan in plans:
            plan.launch(counts_dev.ptr + row * self.rows * 4, self.rows * 4, n, stream.handle)
            first_rows.append(row)
            row += plan.count_rows
        staged = self._pinned("counts", size)
        enqueue.copy(staged.ctypes.data, counts_dev.ptr, size, "d2h", stream.raw, "D2H counts")
        stream.synchronize()
        counts = staged[:size].view(np.int32).reshape(total, self.rows).copy()
        fetches: list[_Fetch | _GflFetch] = []
        for plan, row in zip(plans, first_rows, strict=True):
            fetch = plan.fetch(counts[row : row + plan.count_rows, :n], stream.raw, self._pinned)
            if fetch is not None:
                fetches.append(fetch)
                self.candidate_counts = fetch.counts
        return fetches

    def _gfl(self, filters: list[CandidateFilter]) -> _GflPlan | None:
        """Every stride of a GFL head, decoded into one set of box records (None: copy them whole)."""
        levels = []
        for f in filters:
            arr = self.outputs.get(f.output)
            comp = self.outputs.get(f.companion) if f.companion else None
            if arr is None or comp is None or arr.ndim != 3 or comp.ndim != 3 or arr.dtype != comp.dtype:
                return None
            if comp.shape[1] != arr.shape[1] or f.bins < 1 or comp.shape[2] != 4 * f.bins or f.grid_width < 1:
                return None
            levels.append((f, arr, comp))
        if not levels or len(levels) != levels[0][0].levels:
            return None  # a stride the backend could not take: the whole head is decoded on the host
        capacity = max(f.capacity for f, _, _ in levels)
        records = self._cand.get(":gfl")
        if records is None or records[0].shape[1] != capacity:
            records = self._cand[":gfl"] = (DeviceArray.empty((self.rows, capacity, 8), np.float32, self.ordinal),)
        return _GflPlan(levels, records[0], capacity, self.ordinal, self._gfl_nms(levels[0][0], levels[0][1]))

    def _gfl_nms(self, f: CandidateFilter, scores: DeviceArray) -> tuple[DeviceArray, DeviceArray | None] | None:
        """The device NMS's output records (rows, max_detections, 8) and class mask, when the filter asks
        for it and its limits fit the kernel."""
        if f.nms_iou is None or not 0 < f.max_detections <= GFL_NMS_MAX or f.pre_nms_top_k < 1:
            return None
        classes = scores.shape[2]
        key = f":gfl-nms:{f.max_detections}:{f.keep_classes}"
        bufs = self._cand.get(key)
        if bufs is None:
            out = DeviceArray.empty((self.rows, f.max_detections, 8), np.float32, self.ordinal)
            if f.keep_classes is None:
                bufs = (out,)
            else:
                ok = np.zeros(classes, np.uint8)
                ok[[c for c in f.keep_classes if 0 <= c < classes]] = 1
                mask = DeviceArray.empty((classes,), np.uint8, self.ordinal)
                mask.copy_from_host(ok)
                bufs = (out, mask)
            self._cand[key] = bufs
        return bufs[0], (bufs[1] if len(bufs) > 1 else None)

    def _plan(self, f: CandidateFilter) -> _Plan | None:
        arr = self.outputs.get(f.output)
        comp = self.outputs.get(f.companion) if f.companion else None
        if arr is None or arr.ndim != 3 or (f.companion and (comp is None or comp.ndim != 3)):
            return None
        if f.layout == "channels_first":
            width, anchors, comp_width = arr.shape[1], arr.shape[2], 0
            if width != 4 + f.classes + f.extra or anchors <= f.capacity:
                return None  # not the layout the filter expects (or nothing to gain)
        else:
            anchors, width = arr.shape[1], arr.shape[2]
            comp_width = comp.shape[2] if comp is not None else 0
            if comp is not None and comp.shape[1] != anchors:
                return None
        k = min(f.capacity, anchors)
        bufs = self._cand.get(f.output)
        if bufs is None:
            per = (self.rows, width, k) if f.layout == "channels_first" else (self.rows, k, width)
            bufs = self._cand[f.output] = (
                DeviceArray.empty(per, arr.dtype, self.ordinal),
                DeviceArray.empty((self.rows, k, max(1, comp_width)), arr.dtype, self.ordinal),
                DeviceArray.empty((self.rows, k), np.int32, self.ordinal),
            )
        data, data_comp, index = bufs
        return _Plan(f, arr, comp, (data, data_comp, index), anchors, width, comp_width, k, self.ordinal)


class _Plan:
    """One candidate filter for one run: its kernel launch, then (counts known) its copies."""

    count_rows = 1  # rows of the counts array it uses

    def __init__(
        self,
        f: CandidateFilter,
        arr: DeviceArray,
        comp: DeviceArray | None,
        bufs: tuple[DeviceArray, DeviceArray, DeviceArray],
        anchors: int,
        width: int,
        comp_width: int,
        k: int,
        ordinal: int,
    ) -> None:
        self.f, self.arr, self.comp, self.bufs = f, arr, comp, bufs
        self.anchors, self.width, self.comp_width, self.k, self.ordinal = anchors, width, comp_width, k, ordinal

    def launch(self, count_ptr: int, pitch: int, n: int, stream: int) -> None:
        out, out_comp, index = self.bufs
        f, arr = self.f, self.arr
        suffix = "f16" if arr.dtype == np.float16 else "f32"
        if f.layout == "channels_first":
            kernel(f"ef_candidates_{suffix}", self.ordinal).launch(
                ((self.anchors + 255) // 256, n, 1),
                (256, 1, 1),
                [
                    (arr.ptr, PTR),
                    (out.ptr, PTR),
                    (index.ptr, PTR),
                    (count_ptr, PTR),
                    (f.classes, I32),
                    (f.extra, I32),
                    (self.anchors, I32),
                    (self.k, I32),
                    (f.threshold, F32),
                ],
                stream,
            )
            return
        kernel(f"ef_candidate_rows_{suffix}", self.ordinal).launch(
            ((self.anchors + 7) // 8, n, 1),
            (256, 1, 1),
            [
                (arr.ptr, PTR),
                (self.comp.ptr if self.comp is not None else 0, PTR),
                (out.ptr, PTR),
                (out_comp.ptr, PTR),
                (index.ptr, PTR),
                (count_ptr, PTR),
                (self.anchors, I32),
                (self.width, I32),
                (self.comp_width, I32),
                (self.k, I32),
                (f.threshold, F32),
            ],
            stream,
        )

    def fetch(self, counts: np.ndarray, stream: Any, staging: Callable[[str, int], np.ndarray]) -> _Fetch | None:
        """Queue the copies of the first max(counts) candidates of every frame into pinned staging
        buffers (``staging(key, nbytes)``); None on overflow. ``counts``: (1, n)."""
        counts = counts[0]
        most = int(counts.max(initial=0))
        if most > self.k:
            return None
        m = max(1, most)  # only the anchors some frame kept come back
        n = counts.shape[0]
        out, out_comp, index = self.bufs

        def copy(
            key: str, src: DeviceArray, rows: int, row_bytes: int, pitch: int, shape: tuple[int, ...]
        ) -> np.ndarray:
            nbytes = rows * row_bytes
            host: np.ndarray = staging(f"{self.f.output}:{key}", nbytes)[:nbytes].view(src.dtype).reshape(shape)
            enqueue.copy_2d(
                host.ctypes.data, row_bytes, src.ptr, pitch, row_bytes, rows, "d2h", stream, "D2H candidates"
            )
            return host

        item, k, width, cw = self.arr.dtype.itemsize, self.k, self.width, self.comp_width
        comp_data = None
        if self.f.layout == "channels_first":
            data = copy("data", out, n * width, m * item, k * item, (n, width, m))
        else:
            data = copy("data", out, n, m * width * item, k * width * item, (n, m, width))
            if self.comp is not None:
                comp_data = copy("comp", out_comp, n, m * cw * item, k * out_comp.shape[2] * item, (n, m, cw))
        idx = copy("index", index, n, m * 4, k * 4, (n, m))
        return _Fetch(self, counts, data, comp_data, idx)


class _Fetch:
    """A filter's candidates on their way to the host; :meth:`finish` after the stream is synchronised
    puts them in anchor order (the kernel's order is arbitrary) and zeroes what is past each count."""

    def __init__(
        self, plan: _Plan, counts: np.ndarray, data: np.ndarray, comp: np.ndarray | None, idx: np.ndarray
    ) -> None:
        self.plan, self.counts, self.data, self.comp, self.idx = plan, counts, data, comp, idx

    def names(self) -> list[str]:
        f = self.plan.f
        return [f.output] + ([f.companion] if f.companion and self.comp is not None else [])

    def finish(self) -> dict[str, CandidateRows]:
        p, n, m = self.plan, self.data.shape[0], self.idx.shape[1]
        stale = np.arange(m)[None, :] >= self.counts[:, None]  # past a frame's count: left from older runs
        idx = self.idx  # pinned staging: everything returned below is a fresh array
        idx[stale] = -1
        order = np.argsort(np.where(stale, p.anchors, idx), axis=1, kind="stable")
        idx = np.take_along_axis(idx, order, axis=1)
        if p.f.layout == "channels_first":
            data = np.take_along_axis(self.data, order[:, None, :], axis=2)
            data[np.broadcast_to(stale[:, None, :], data.shape)] = 0
            return {p.f.output: CandidateRows(data, idx, (n, p.width, p.anchors), axis=2)}
        data = np.take_along_axis(self.data, order[:, :, None], axis=1)
        data[stale] = 0
        result = {p.f.output: CandidateRows(data, idx, (n, p.anchors, p.width), axis=1)}
        if self.comp is not None and p.f.companion:
            comp = np.take_along_axis(self.comp, order[:, :, None], axis=1)
            comp[stale] = 0
            result[p.f.companion] = CandidateRows(comp, idx, (n, p.anchors, p.comp_width), axis=1)
        return result


class _TopKPlan:
    """A classifier's top k for one run: the kernel and one small copy (values, columns, log-sum-exp
    and minimum of each row packed in (n, 2k + 2) 32-bit words), queued together; :meth:`finish` once the
    stream is synchronised."""

    def __init__(self, f: CandidateFilter, arr: DeviceArray, columns: int, out: DeviceArray, ordinal: int) -> None:
        self.f, self.arr, self.columns, self.out, self.ordinal = f, arr, columns, out, ordinal
        self._host: np.ndarray | None = None

    def queue(self, n: int, stream: Any, staging: np.ndarray) -> None:
        suffix = "f16" if self.arr.dtype == np.float16 else "f32"
        kernel(f"ef_top_k_{suffix}", self.ordinal).launch(
            (n, 1, 1),
            (256, 1, 1),
            [(self.arr.ptr, PTR), (self.out.ptr, PTR), (self.columns, I32), (self.f.k, I32)],
            stream.handle,
            shared_bytes=self.columns * 4,
        )
        words = 2 * self.f.k + 2
        host = staging[: n * words * 4].view(np.float32).reshape(n, words)
        enqueue.copy(host.ctypes.data, self.out.ptr, host.nbytes, "d2h", stream.raw, "D2H top k")
        self._host = host

    def finish(self) -> TopK:
        assert self._host is not None
        a, k = self._host.copy(), self.f.k  # out of the pinned staging buffer, which the next run reuses
        return TopK(
            a[:, :k], a[:, k : 2 * k].view(np.int32), a[:, 2 * k], a[:, 2 * k + 1], (a.shape[0], *self.arr.shape[1:])
        )


_RECORD_WORDS = 8  # cell, class, score, x1, y1, x2, y2, unused (see ef_gfl_boxes)


GFL_NMS_MAX = 2048  # EF_NMS_MAX: records a frame may hold for the device NMS (one block sorts them)


class _GflPlan:
    """Every stride of a GFL head for one run: a kernel per stride, all appending to one set of box
    records (counts row 0: records per frame; row 1: cells with non-finite values), then, when the
    filter asks, the device NMS (row 2: detections per frame, -1 where a frame had too many records for
    it), then one copy: the detections, or the records when the NMS could not finish every frame."""

    count_rows = 3

    def __init__(
        self,
        levels: list[tuple[CandidateFilter, DeviceArray, DeviceArray]],
        records: DeviceArray,
        capacity: int,
        ordinal: int,
        nms: tuple[DeviceArray, DeviceArray | None] | None = None,
    ) -> None:
        self.levels, self.records, self.capacity, self.ordinal, self.nms = levels, records, capacity, ordinal, nms

    def launch(self, count_ptr: int, pitch: int, n: int, stream: int) -> None:
        for f, arr, comp in self.levels:
            suffix = "f16" if arr.dtype == np.float16 else "f32"
            anchors, classes = arr.shape[1], arr.shape[2]
            kernel(f"ef_gfl_boxes_{suffix}", self.ordinal).launch(
                ((anchors + 7) // 8, n, 1),
                (256, 1, 1),
                [
                    (arr.ptr, PTR),
                    (comp.ptr, PTR),
                    (self.records.ptr, PTR),
                    (count_ptr, PTR),
                    (count_ptr + pitch, PTR),
                    (anchors, I32),
                    (classes, I32),
                    (f.bins, I32),
                    (f.grid_width, I32),
                    (float(f.stride), F32),
                    (f.first, I32),
                    (self.capacity, I32),
                    (f.threshold, F32),
                    (int(f.multi_label), I32),
                ],
                stream,
            )
        if self.nms is not None:
            f, arr = self.levels[0][0], self.levels[0][1]
            out, mask = self.nms
            kernel("ef_gfl_nms", self.ordinal).launch(
                (n, 1, 1),
                (256, 1, 1),
                [
                    (self.records.ptr, PTR),
                    (count_ptr, PTR),
                    (out.ptr, PTR),
                    (count_ptr + 2 * pitch, PTR),
                    (mask.ptr if mask is not None else 0, PTR),
                    (self.capacity, I32),
                    (f.max_detections, I32),
                    (f.pre_nms_top_k, I32),
                    (float(f.nms_iou or 0.0), F32),
                    (arr.shape[2], I32),
                ],
                stream,
            )

    def fetch(self, counts: np.ndarray, stream: Any, staging: Callable[[str, int], np.ndarray]) -> _GflFetch | None:
        """Queue the copy of every frame's detections (device NMS) or records into pinned staging; None on
        overflow (the full tensors are copied instead)."""
        most = int(counts[0].max(initial=0))
        if most > self.capacity:
            return None
        n = counts.shape[1]
        final = self.nms is not None and bool((counts[2] >= 0).all())
        src, per = (
            (self.nms[0], self.nms[0].shape[1]) if final and self.nms is not None else (self.records, self.capacity)
        )
        kept = counts[2] if final else counts[0]
        m = max(1, int(kept.max(initial=0)))
        row_bytes, pitch = m * _RECORD_WORDS * 4, per * _RECORD_WORDS * 4
        host = staging(":gfl", n * row_bytes)[: n * row_bytes].view(np.float32).reshape(n, m, _RECORD_WORDS)
        enqueue.copy_2d(host.ctypes.data, row_bytes, src.ptr, pitch, row_bytes, n, "d2h", stream, "D2H box records")
        return _GflFetch(self, kept.copy(), counts[1] > 0, host, final)


class _GflFetch:
    """A GFL head's records on their way to the host; :meth:`finish` (stream synchronised) puts them in
    (frame, cell, class) order, the kernels' being arbitrary."""

    def __init__(
        self, plan: _GflPlan, counts: np.ndarray, nonfinite: np.ndarray, host: np.ndarray, final: bool
    ) -> None:
        self.plan, self.counts, self.nonfinite, self.host, self.final = plan, counts, nonfinite, host, final

    def names(self) -> list[str]:
        return [name for f, _, _ in self.plan.levels for name in (f.output, f.companion) if name]

    def finish(self) -> dict[str, BoxCandidates | ConsumedOutput]:
        n, m = self.host.shape[:2]
        frame, slot = np.nonzero(np.arange(m)[None, :] < self.counts[:, None])
        rec = self.host[frame, slot]  # a fresh array: the staging buffer is reused by the next run
        ints = rec[:, :2].view(np.int32)
        cells = sum(arr.shape[1] for _, arr, _ in self.plan.levels)
        classes = max(arr.shape[2] for _, arr, _ in self.plan.levels)
        if not self.final:  # records in the kernels' order: put them in (frame, cell, class) order
            key = (frame.astype(np.int64) * cells + ints[:, 0]) * classes + ints[:, 1]
            order = np.argsort(key, kind="stable")
            rec, frame = rec[order], frame[order]
            ints = rec[:, :2].view(np.int32)
        cell, cls = ints[:, 0].astype(np.int64), ints[:, 1].astype(np.int64)
        score, box = rec[:, 2].copy(), rec[:, 3:7].copy()
        result: dict[str, BoxCandidates | ConsumedOutput] = {}
        for f, arr, comp in self.plan.levels:
            shape = (n, arr.shape[1], arr.shape[2])
            result[f.output] = BoxCandidates(frame, cell, cls, score, box, self.nonfinite, shape, f.first, self.final)
            if f.companion:
                result[f.companion] = ConsumedOutput((n, *comp.shape[1:]), comp.dtype, self.nonfinite)
        return result
