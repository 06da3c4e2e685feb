"""ONNX Runtime backend: CPU, or CUDA / TensorRT execution providers where installed.

On ``cuda:N`` (onnxruntime-gpu + cuda-python) the input buffers live on the device, are bound with
IOBinding together with preallocated device outputs, and ORT runs on this backend's own CUDA stream;
only the outputs come back to the host (``_ort_cuda.py``). Optional CUDA graphs replay the whole run.

With several inference workers (``Backend.workers``) each gets a *lane*: its own session on its own
CUDA stream, so one worker's host-side work (waiting for its copies, re-taking the GIL, the candidate
filter's bookkeeping) overlaps the other's kernels instead of leaving the GPU idle. A worker thread takes
a lane on its first run and keeps it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import BackendError, BackendUnavailableError
from .._sparse import CandidateFilter
from ._base import Backend, InputBuffer, TensorSpec
from ._configs import OnnxRuntimeConfig

if TYPE_CHECKING:
    from ._ort_cuda import Lane

__all__ = ["OnnxRuntimeBackend"]

_log = logging.getLogger(__name__)
_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(uint8)": "uint8",
    "tensor(int8)": "int8",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(bool)": "bool",
    "tensor(double)": "float64",
}


def _ort() -> Any:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise BackendUnavailableError(
            "the onnxruntime backend needs ONNX Runtime: pip install 'edgefleet-sdk[cpu]' "
            "(or 'edgefleet-sdk[cuda]' for onnxruntime-gpu)"
        ) from exc
    return ort


def _tensorrt_libs() -> bool:
    """onnxruntime-gpu lists its TensorRT provider even where TensorRT's libraries are missing."""
    import ctypes

    try:
        ctypes.CDLL("libnvinfer.so.10")
    except OSError:
        return False
    return True


def _shape(raw: Any) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) and d > 0 else -1 for d in raw)


class OnnxRuntimeBackend(Backend):
    def __init__(self, config: OnnxRuntimeConfig | None = None, device: str = "cpu") -> None:
        super().__init__(device)
        self.config = config or OnnxRuntimeConfig.model_validate({})
        self._session: Any = None
        self.providers: list[str] = []
        self._stream: Any = None  # edgefleet.sdk._cuda._bindings.Stream on the CUDA path
        self._ordinal = 0
        self._on_device = False
        self._gpu_from_host = False
        self._graphs = True  # cuda_graph asked for and possible (every output shape known up front)
        self._next_graph = 0
        self._candidates: dict[str, CandidateFilter] = {}
        self.lanes: list[Lane] = []  # the CUDA path's sessions + streams
        self._thread_lane = threading.local()
        self._lane_lock = threading.Lock()
        self._next_lane = 0

    def _providers(self, ort: Any, stream: Any = None) -> list[Any]:
        available = set(ort.get_available_providers())
        if self.config.providers:
            wanted = list(self.config.providers)
        elif self.device.startswith("cuda"):
            wanted = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
        else:
            wanted = ["CPUExecutionProvider"]
        chosen: list[Any] = []
        device_id = self._ordinal
        for name in wanted:
            if name not in available or (name == "TensorrtExecutionProvider" and not _tensorrt_libs()):
                continue
            if name == "CUDAExecutionProvider":
                cuda_opts: dict[str, Any] = {"device_id": device_id, "cudnn_conv_algo_search": "HEURISTIC"}
                if stream is not None:  # ORT's kernels run on our stream: ordered with our copies
                    cuda_opts |= {"has_user_compute_stream": "1", "user_compute_stream": str(stream.handle)}
                if self.config.cuda_graph and stream is not None and self._graphs:
                    cuda_opts["enable_cuda_graph"] = "1"
                chosen.append((name, cuda_opts))
            elif name == "TensorrtExecutionProvider":
                chosen.append(
                    (
                        name,
                        {
                            "device_id": device_id,
                            "trt_fp16_enable": self.config.fp16,
                            "trt_engine_cache_enable": True,
                        },
                    )
                )
            else:
                chosen.append(name)
        if self.device.startswith("cuda") and not any(
            (p[0] if isinstance(p, tuple) else p) in {"CUDAExecutionProvider", "TensorrtExecutionProvider"}
            for p in chosen
        ):
            _log.warning(
                "device %s asked for, but this onnxruntime has no CUDA or TensorRT provider "
                "(install edgefleet-sdk[cuda]); running on the CPU",
                self.device,
            )
        if not chosen:
            chosen = ["CPUExecutionProvider"]
        return chosen

    def _prepare_cuda(self, ort: Any) -> None:
        """On cuda:N with a CUDA-capable ORT: resolve the device and make the stream ORT will run on.
        Without cuda-python, ORT still runs on the GPU but from host buffers (one round trip per batch)."""
        self._ordinal = int(self.device.split(":")[1]) if self.device[5:].isdigit() else 0
        if not self.device.startswith("cuda"):
            return
        gpu = {"CUDAExecutionProvider", "TensorrtExecutionProvider"} & set(ort.get_available_providers())
        if not gpu or not self.config.io_binding:
            return
        try:
            from .._cuda._bindings import Stream, parse_device

            self._ordinal = parse_device(self.device)
            self._stream = Stream(self._ordinal)
        except BackendUnavailableError:
            _log.warning(
                "cuda-python is not installed: ONNX Runtime runs on %s from host buffers "
                "(pip install 'edgefleet-sdk[cuda]' for device buffers and GPU preprocessing)",
                self.device,
            )

    def _open(self, ort: Any, model_path: Path, opts: Any, stream: Any = None) -> Any:
        try:
            return ort.InferenceSession(str(model_path), sess_options=opts, providers=self._providers(ort, stream))
        except Exception as exc:  # ORT raises its own pybind exception types
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BackendError(f"{model_path}: ONNX Runtime cannot load this model: {msg}") from None

    def load(self, model_path: Path) -> None:
        ort = _ort()
        self._prepare_cuda(ort)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        if self.config.intra_op_threads:
            opts.intra_op_num_threads = self.config.intra_op_threads
        elif self._stream is not None:
            # On the GPU the CPU pool only runs shape glue: one thread, no spinning, so it does not
            # compete with the decoder threads and the post-processing thread for cores.
            opts.intra_op_num_threads = 1
        if self._stream is not None:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if not model_path.is_file():
            raise BackendError(f"{model_path}: no such model file")
        self._session = self._open(ort, model_path, opts, self._stream)
        symbolic = [o.name for o in self._session.get_outputs() if any(d <= 0 for d in _shape(o.shape)[1:])]
        if self.config.cuda_graph and self._stream is not None and symbolic:
            # A graph replays fixed addresses, but ORT allocates outputs of unknown shape itself on the
            # first run (and would capture that run): no graphs for such a model rather than wrong ones.
            _log.warning(
                "%s: cuda_graph is off for this model: output %s has dimensions unknown before a run",
                model_path,
                symbolic[0],
            )
            self._graphs = False
            self._session = self._open(ort, model_path, opts, self._stream)
        self.providers = list(self._session.get_providers())
        self.inputs = tuple(
            TensorSpec(i.name, _shape(i.shape), _DTYPES.get(i.type, i.type)) for i in self._session.get_inputs()
        )
        self.outputs = tuple(
            TensorSpec(o.name, _shape(o.shape), _DTYPES.get(o.type, o.type)) for o in self._session.get_outputs()
        )
        if len(self.inputs) != 1:
            raise BackendError(f"{model_path}: expected one image input, the model has {len(self.inputs)}")
        self._output_names = [o.name for o in self.outputs]
        on_gpu = bool({"CUDAExecutionProvider", "TensorrtExecutionProvider"} & set(self.providers))
        if self.device.startswith("cuda") and not on_gpu and self._stream is not None:
            _log.warning("ONNX Runtime could not start its CUDA provider on %s; running on the CPU", self.device)
        self._on_device = on_gpu and self._stream is not None
        self._gpu_from_host = on_gpu and self._stream is None  # onnxruntime-gpu without cuda-python
        # InferenceSession.run is thread-safe. On the CPU path nothing else is shared between calls; on the
        # CUDA path every worker gets its own lane (session + stream), and a device buffer's binding is
        # used by one batch at a time.
        self.concurrent_infer = self.providers[:1] == ["CPUExecutionProvider"] or self._on_device
        if self._on_device:
            self._open_lanes(ort, model_path, opts)

    def _open_lanes(self, ort: Any, model_path: Path, opts: Any) -> None:
        from .._cuda._bindings import Stream
        from ._ort_cuda import Lane

        self.lanes = [Lane(0, self._session, self._stream)]
        for i in range(1, max(1, self.workers)):
            stream = Stream(self._ordinal)
            try:
                session = self._open(ort, model_path, opts, stream)
            except BaseException:
                stream.close()
                raise
            self.lanes.append(Lane(i, session, stream))

    def lane(self) -> Lane:
        """The calling thread's lane: taken round-robin on its first run, then kept."""
        lane: Lane | None = getattr(self._thread_lane, "lane", None)
        if lane is None:
            with self._lane_lock:
                lane = self.lanes[self._next_lane % len(self.lanes)]
                self._next_lane += 1
            self._thread_lane.lane = lane
        return lane

    def allocate_input(self, batch: int) -> InputBuffer:
        spec = self.inputs[0]
        rows = self.fixed_batch or batch
        dims = (self.input_shape or spec.shape)[1:]
        if any(d <= 0 for d in dims):
            raise BackendError(
                f"input {spec.name} has dynamic dimensions {list(spec.shape)}; "
                "the manifest's input shape must fix every dimension but the batch"
            )
        shape = (rows, *dims)
        if self._on_device:
            return self._device_buffer(shape, rows)
        return InputBuffer(array=np.zeros(shape, dtype=spec.dtype), capacity=rows, device="cpu")

    def infer(self, buffer: InputBuffer, n: int) -> dict[str, np.ndarray]:
        if self._session is None:
            raise BackendError("backend is closed")
        if buffer.device != "cpu":
            return self._infer_device(buffer, n)
        rows = self.fixed_batch or n
        if self._gpu_from_host and self.config.pad_batch:
            rows = buffer.capacity  # one input shape: the CUDA EP re-plans on every change (pad_batch)
        feed = {self.inputs[0].name: buffer.array[:rows]}
        try:
            values = self._session.run(self._output_names, feed)
        except Exception as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BackendError(f"ONNX Runtime inference failed: {msg}") from None
        return {name: np.asarray(v)[:n] for name, v in zip(self._output_names, values, strict=True)}

    def describe(self) -> str:
        return f"onnxruntime on {self.device} ({', '.join(self.providers)})"

    def warmup(self, buffer: InputBuffer, n: int = 1, iterations: int = 3) -> float:
        """Warm every lane (each session pays its own first run), then time the first as usual."""
        from ._ort_cuda import DeviceBinding

        if isinstance(buffer.handle, DeviceBinding):
            for lane in self.lanes[1:]:
                buffer.handle.run(n, lane)
        return super().warmup(buffer, n, iterations)

    def close(self) -> None:
        streams = [lane.stream for lane in self.lanes[1:]]
        self.lanes = []  # every session goes before the stream it runs on
        self._session = None
        self._candidates = {}
        for stream in streams:
            stream.close()
        if self._stream is not None:
            self._stream.close()

    # --- the CUDA path: device buffers + IOBinding ------------------------------------------------
    def _device_buffer(self, shape: tuple[int, ...], rows: int) -> InputBuffer:
        from ._ort_cuda import DeviceBinding

        binding = DeviceBinding(self, shape, rows, graph_id=self._next_graph)
        self._next_graph += 1
        return InputBuffer(array=binding.input, capacity=rows, device=f"cuda:{self._ordinal}", handle=binding)

    def _infer_device(self, buffer: InputBuffer, n: int) -> dict[str, np.ndarray]:
        from ._ort_cuda import DeviceBinding

        binding = buffer.handle
        if not isinstance(binding, DeviceBinding):
            raise BackendError("this input buffer was not allocated by this backend")
        return binding.run(n)

    def filter_candidates(self, f: CandidateFilter) -> bool:
        """On device buffers only (``_ort_cuda`` runs the kernels). Shapes exporters leave symbolic are
        checked again on each run, where a filter that does not fit is skipped."""
        names = {o.name: o for o in self.outputs}
        spec, comp = names.get(f.output), names.get(f.companion) if f.companion else None
        if f.layout == "top_k":
            return self._filter_top_k(f, spec)
        if not self._on_device or spec is None or len(spec.shape) != 3 or (f.companion and comp is None):
            return False
        if comp is not None and len(comp.shape) != 3:
            return False
        if f.layout == "gfl" and not (
            comp is not None and f.bins >= 1 and f.grid_width >= 1 and comp.shape[2] in (-1, 4 * f.bins)
        ):
            return False
        if f.layout == "channels_first" and (
            spec.shape[1] not in (-1, 4 + f.classes + f.extra) or 0 < spec.shape[2] <= f.capacity
        ):
            return False  # not the layout it expects, or nothing to gain
        self._candidates[f.output] = f
        return True

    def _filter_top_k(self, f: CandidateFilter, spec: TensorSpec | None) -> bool:
        from ._ort_cuda import TOP_K_MAX, TOP_K_MAX_COLUMNS

        if not self._on_device or spec is None or len(spec.shape) < 2 or not 0 < f.k <= TOP_K_MAX:
            return False
        dims = spec.shape[1:]
        if all(d > 0 for d in dims) and not f.k <= int(np.prod(dims)) <= TOP_K_MAX_COLUMNS:
            return False
        self._candidates[f.output] = f
        return True
