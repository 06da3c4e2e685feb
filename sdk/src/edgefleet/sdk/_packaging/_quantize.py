"""``edgefleet models quantize``: an INT8 version of a package, made with ONNX Runtime's static QDQ
quantization and checked against the FP32 version before anything is written.

1. Calibration: the first ``frames`` frames of a clip or image folder, preprocessed exactly as the
   pipeline will (the package's own preprocessing), feed ONNX Runtime's calibrator (MinMax by default);
   weights INT8 per channel, activations UINT8 (the combination ONNX Runtime's x86 CPU kernels run fastest,
   U8S8), or with ``activations="int8"`` symmetric INT8 activations (zero point 0: the only kind
   TensorRT takes; ONNX Runtime's CPU kernels run it too, slower). The weights use 7 of their 8 bits
   (ONNX Runtime's ``reduce_range``) unless ``full_range``: on an x86 CPU without VNNI those kernels
   add pairs of u8 x s8 products in 16 bits, which saturate on full-range weights (NanoDet-m's recall
   against FP32: 0.871 on such a CPU; 7-bit weights there, and full-range ones on a CPU with VNNI,
   0.957), and the CPUs a package will run on are not known when it is made.
   Nodes that cannot be INT8 without breaking the model stay in floating point and are named in
   the manifest: a ``Pad`` whose constant is not finite (the ``-inf`` border a max-pool pads with: as an
   INT8 range it would take every other value of that tensor to one level).
2. The check: the next ``held_out`` frames, never seen in calibration, through both versions and the
   package's decoder: detections matched at IoU 0.5 within a class (recall and precision against FP32),
   or a classifier's top-1 agreement. Below the minimums (``min_recall`` ...), nothing is written.
3. The new package: the source's files with the INT8 model in place of the FP32 one, the next minor
   version (or ``version``), and a ``quantization`` record with every figure (see QuantizationSpec).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import QuantizationError, SourceError
from .._package import ModelPackage, file_sha256, load_package
from ._accuracy import Agreement, detection_agreement, top1_agreement
from ._edit import next_version
from ._files import dump_manifest, file_table, replace_folder

__all__ = ["QuantizeReport", "quantize_package"]

_METHODS = ("minmax", "entropy", "percentile")
_INSTALL = "INT8 quantization needs the onnx package: pip install 'edgefleet-sdk[quantize]'"


@dataclass(frozen=True)
class QuantizeReport:
    """What ``quantize_package`` wrote and measured. ``fp32_ms`` / ``int8_ms``: mean time per held-out
    frame of one single-threaded ONNX Runtime session each, on this machine (not recorded in the
    manifest: they depend on the CPU)."""

    root: Path
    package: ModelPackage
    agreement: Agreement
    fp32_ms: float
    int8_ms: float
    left_in_float: tuple[str, ...]


def _frames(path: Path, skip: int, count: int) -> Iterator[np.ndarray]:
    """Frames ``skip`` .. ``skip + count`` of a clip or image folder (BGR), read with the SDK's sources
    (a folder's unreadable files are passed over with a warning)."""
    from .._sources import create_source, parse_source

    try:
        source = create_source(parse_source(str(path)))
        source.open()
    except SourceError as exc:
        raise QuantizationError(f"--calibrate {path}: {exc}") from None
    try:
        n = 0
        while n < skip + count:
            image = source.read(None)
            if image is None:
                return
            if n >= skip:
                yield image
            n += 1
    finally:
        source.close()


def _count_frames(path: Path, limit: int) -> int:
    return sum(1 for _ in _frames(path, 0, limit))


_WEIGHTED = {"Conv", "ConvTranspose", "MatMul", "Gemm"}


def _tail(model: Any) -> list[str]:
    """The nodes after the last weighted layer on the way to each output: the head's own arithmetic
    (sigmoid, box decoding, the concatenation of boxes and scores into one tensor). Walked back from the
    graph's outputs, stopping at a convolution or matrix product."""
    producer = {o: n for n in model.graph.node for o in n.output}
    seen: set[str] = set()
    order: list[str] = []
    todo = [o.name for o in model.graph.output]
    while todo:
        node = producer.get(todo.pop())
        if node is None or node.name in seen or node.op_type in _WEIGHTED:
            continue
        seen.add(node.name)
        order.append(node.name)
        todo.extend(node.input)
    return order


def _excluded_nodes(model: Any) -> list[tuple[str, str]]:
    """(node, why) for nodes that must stay in floating point: a ``Pad`` whose constant is not finite,
    and the post-processing tail (:func:`_tail`), whose one output tensor may hold values of very different
    ranges (an Ultralytics head concatenates boxes in pixels, 0..640, with scores, 0..1: one INT8 scale
    for both is 2.5 per level, and every score becomes 0)."""
    from onnx import numpy_helper

    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type == "Pad" and len(node.input) > 2 and node.input[2] in consts:
            value = np.asarray(consts[node.input[2]], np.float64)
            if value.size and not np.isfinite(value).all():
                out.append((node.name, f"a Pad whose constant is {value.ravel()[0]}"))
    kinds = {n.name: n.op_type for n in model.graph.node}
    done = {name for name, _ in out}
    out += [(name, f"{kinds[name]} after the last weighted layer") for name in _tail(model) if name not in done]
    return out


class _Reader:
    """ONNX Runtime's CalibrationDataReader protocol over preprocessed frames."""

    def __init__(self, name: str, tensors: Iterator[np.ndarray]) -> None:
        self.name, self.tensors, self.count = name, tensors, 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        x = next(self.tensors, None)
        if x is None:
            return None
        self.count += 1
        return {self.name: x}


def _tensors(pkg: ModelPackage, path: Path, skip: int, count: int) -> Iterator[np.ndarray]:
    from .._preprocess import CpuPreprocessor

    spec = pkg.manifest.input
    pre = CpuPreprocessor(spec)
    row = (3, spec.height, spec.width) if spec.layout == "NCHW" else (spec.height, spec.width, 3)
    for image in _frames(path, skip, count):
        out = np.empty((1, *row), spec.dtype)
        pre.write(image, out[0])
        yield out


def _quantize(
    pkg: ModelPackage, calibrate: Path, frames: int, method: str, dest: Path, reduce_range: bool, activations: str
) -> tuple[str, ...]:
    try:
        import onnx
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError as exc:
        raise QuantizationError(f"{_INSTALL} ({exc})") from None
    with tempfile.TemporaryDirectory(prefix="edgefleet-quantize-") as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        try:
            quant_pre_process(str(pkg.model_path), str(prepared), skip_symbolic_shape=True)
        except Exception as exc:  # onnx / ORT errors of every kind: the model cannot be prepared
            raise QuantizationError(
                f"{pkg.ref}: ONNX Runtime cannot prepare the model for quantization: {exc}"
            ) from None
        excluded = _excluded_nodes(onnx.load(str(prepared)))
        reader = _Reader(pkg.manifest.input.name, _tensors(pkg, calibrate, 0, frames))
        try:
            quantize_static(
                str(prepared),
                str(dest),
                reader,
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                reduce_range=reduce_range,
                extra_options={"ActivationSymmetric": activations == "int8", "WeightSymmetric": True},
                calibrate_method={
                    "minmax": CalibrationMethod.MinMax,
                    "entropy": CalibrationMethod.Entropy,
                    "percentile": CalibrationMethod.Percentile,
                }[method],
                nodes_to_exclude=[name for name, _ in excluded],
            )
        except QuantizationError:
            raise
        except Exception as exc:
            raise QuantizationError(f"{pkg.ref}: ONNX Runtime's quantizer failed: {exc}") from None
    if reader.count == 0:
        raise QuantizationError(f"--calibrate {calibrate}: no frames to calibrate on")
    return tuple(f"{name}: {why}" for name, why in excluded)


def _check(
    fp32: ModelPackage, int8: ModelPackage, calibrate: Path, skip: int, count: int
) -> tuple[Agreement, float, float]:
    """Both versions on the held-out frames through the SDK (load checks, preprocessing, decoder)."""
    from .._config import OnnxRuntimeConfig
    from .._model import load_model

    single = OnnxRuntimeConfig(intra_op_threads=1)
    models = [load_model(p, single, warmup=False) for p in (fp32, int8)]
    total, times = Agreement(), [0.0, 0.0]
    classify = fp32.manifest.task == "classification"
    try:
        for image in _frames(calibrate, skip, count):
            decoded = []
            for i, m in enumerate(models):
                buf = m.acquire_buffer(1.0)
                if buf is None:
                    raise QuantizationError("no input buffer free")
                try:
                    t = m.preprocess(image, buf, 0)
                    t0 = time.perf_counter()
                    out = m.backend.infer(buf, 1)
                    times[i] += time.perf_counter() - t0
                    decoded.append(m.decoder.decode(out, [t])[0])
                finally:
                    m.release_buffer(buf)
            if classify:
                top1_agreement(total, decoded[0].classifications, decoded[1].classifications)
            else:
                detection_agreement(total, decoded[0].detections, decoded[1].detections)
    finally:
        for m in models:
            m.close()
    n = max(1, total.frames)
    return total, times[0] / n * 1000, times[1] / n * 1000


def _refuse_below(pkg: ModelPackage, a: Agreement, minimums: dict[str, float]) -> None:
    if pkg.manifest.task == "classification":
        got = {"top1_agreement": a.top1}
    else:
        if a.reference == 0:
            raise QuantizationError(
                f"{pkg.ref} found nothing on the {a.frames} held-out frames: no detections to compare "
                "(calibrate on frames like the ones it will see)"
            )
        got = {"recall": a.recall, "precision": a.precision}
    low = [
        f"{k} {v if v is None else round(v, 4)} < {minimums[k]}" for k, v in got.items() if v is None or v < minimums[k]
    ]
    if low:
        raise QuantizationError(
            f"the INT8 version of {pkg.ref} is below its accuracy check on {a.frames} held-out frames "
            f"({', '.join(low)}); nothing written (try --method entropy or percentile, or more calibration frames)"
        )


def quantize_package(
    package: Path,
    calibrate: Path,
    out: Path | None = None,
    *,
    check: Path | None = None,
    frames: int = 200,
    held_out: int = 100,
    version: str | None = None,
    method: str = "minmax",
    min_recall: float = 0.95,
    min_precision: float = 0.90,
    min_top1: float = 0.95,
    full_range: bool = False,
    activations: str = "uint8",
    force: bool = False,
) -> QuantizeReport:
    """Write an INT8 (QDQ) version of the package at ``package`` into ``out`` (default: beside it,
    ``<folder>-int8``) after checking it against the FP32 version (see the module's docstring). The
    check runs on the ``held_out`` frames after the calibration ones, or on the first ``held_out`` of
    ``check`` (another clip or folder) when given. A ``calibrate`` with fewer than ``frames + held_out``
    frames (and no ``check``) is split two thirds / one third.

    Raises :class:`QuantizationError` (nothing written) when the model cannot be quantized, the frames
    cannot be read, or the INT8 version falls below ``min_recall`` / ``min_precision`` (detectors) or
    ``min_top1`` (classifiers). ``full_range``: 8-bit weights (only where every CPU it will run on has
    VNNI, or it runs on a GPU or TensorRT); by default 7-bit (see the module's docstring). ``activations``:
    ``"uint8"`` (ONNX Runtime's fastest on x86 CPUs) or ``"int8"``, symmetric (for TensorRT)."""
    pkg = load_package(package)
    m = pkg.manifest
    if method not in _METHODS:
        raise QuantizationError(f"--method must be one of {', '.join(_METHODS)}, got {method!r}")
    if activations not in ("uint8", "int8"):
        raise QuantizationError(f"--activations must be uint8 or int8, got {activations!r}")
    if m.task not in ("detection", "segmentation", "pose", "classification"):
        raise QuantizationError(f"{pkg.ref} is a {m.task} model: there is no accuracy check for it")
    if not m.model.lower().endswith(".onnx") or m.input.dtype != "float32":
        raise QuantizationError(f"{pkg.ref}: only an FP32 ONNX model (float32 input) can be quantized here")
    if m.quantization is not None:
        raise QuantizationError(f"{pkg.ref} is already an INT8 version (of {m.quantization.source})")
    if frames < 1 or held_out < 1:
        raise QuantizationError("--frames and --held-out must be at least 1")
    if check is None:
        available = _count_frames(calibrate, frames + held_out)
        if available < frames + held_out:
            frames, held_out = max(1, available * 2 // 3), available - max(1, available * 2 // 3)
        if held_out < 10:
            raise QuantizationError(
                f"--calibrate {calibrate}: {available} frames; at least 15 are needed (10 held out)"
            )
        check, skip = calibrate, frames
    else:
        frames = min(frames, _count_frames(calibrate, frames))
        held_out, skip = min(held_out, _count_frames(check, held_out)), 0
        if held_out < 10:
            raise QuantizationError(f"--check {check}: {held_out} frames; at least 10 are needed")
    src_root = pkg.root
    out = out if out is not None else src_root.with_name(f"{src_root.name}-int8")
    if out.exists() and not force:
        raise QuantizationError(f"{out} exists; choose another --out or pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{m.name}-int8-", dir=out.parent))
    try:
        model_name = f"{Path(m.model).stem}.int8.onnx"
        for rel in m.files:
            if rel != m.model:
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src_root / rel, stage / rel)
        with warnings.catch_warnings(), np.errstate(all="ignore"), contextlib.redirect_stdout(io.StringIO()):
            # ORT's quantizer divides by a zero scale for constant tensors and warns (it handles them), and
            # its histogram calibrators print their progress
            warnings.simplefilter("ignore")
            left_in_float = _quantize(pkg, calibrate, frames, method, stage / model_name, not full_range, activations)
        import onnxruntime

        record: dict[str, Any] = {
            "tool": f"onnxruntime {onnxruntime.__version__}",
            "calibration_method": method,
            "weights": "int8" if full_range else "int7",
            "activations": activations,
            "source": pkg.ref,
            "source_sha256": file_sha256(pkg.model_path),
            "calibration": calibrate.name,
            "checked_on": check.name,
            "calibration_frames": frames,
            "held_out_frames": held_out,
            "left_in_float": list(left_in_float),
        }
        fields = m.model_dump(mode="json", exclude_none=True)
        for key in ("signature", "engines", "golden"):  # they were for the FP32 file
            fields.pop(key, None)
        fields.update(
            version=version or next_version(m.version, "minor"),
            description=f"{m.description} (INT8, from {pkg.ref})".strip(),
            model=model_name,
            files=file_table(stage, sorted([*(k for k in m.files if k != m.model), model_name])),
            quantization=record,
        )
        (stage / "manifest.yaml").write_text(dump_manifest(fields), encoding="utf-8")
        agreement, fp32_ms, int8_ms = _check(pkg, load_package(stage), check, skip, held_out)
        minimums = (
            {"top1_agreement": min_top1}
            if m.task == "classification"
            else {"recall": min_recall, "precision": min_precision}
        )
        _refuse_below(pkg, agreement, minimums)
        record.update(held_out_frames=agreement.frames, thresholds=minimums)
        if m.task == "classification":
            record["top1_agreement"] = round(agreement.top1 or 0.0, 4)
            if agreement.top1_confident is not None:
                record["top1_agreement_confident"] = round(agreement.top1_confident, 4)
        else:
            record.update(recall=round(agreement.recall or 0.0, 4), precision=round(agreement.precision or 0.0, 4))
        (stage / "manifest.yaml").write_text(
            dump_manifest(fields, f"Written by `edgefleet models quantize` from {pkg.ref}."), encoding="utf-8"
        )
        load_package(stage)
        replace_folder(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return QuantizeReport(out, load_package(out), agreement, fp32_ms, int8_ms, left_in_float)
