"""A model file checked without running it: is it an ONNX model, and do its graph inputs and outputs match
what the manifest declares? The controller has no ONNX Runtime, so this reads the protobuf wire format of
``ModelProto`` itself (no dependency): every field's encoding and length is checked, but only the parts
that describe the graph's interface are decoded; weights are stepped over by their length.

What it catches: a file that is not ONNX at all, a truncated or corrupt one, and a model whose tensors
contradict the manifest (the same comparison the agent makes after loading). What it cannot catch: an
operator or opset that the agent's ONNX Runtime does not support; the agent's load refuses those.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ._errors import ModelMismatchError, ModelPackageError
from ._manifest import Manifest

__all__ = [
    "ENGINE_SUFFIXES",
    "GraphTensor",
    "ModelInterface",
    "check_dry_run",
    "check_model_file",
    "check_tensors",
    "read_graph_interface",
    "read_model_interface",
]

# Model files that are not ONNX protobuf: TensorRT engines (the tensorrt backend loads them as they are)
# and ONNX Runtime's flatbuffer format.
ENGINE_SUFFIXES = (".engine", ".plan", ".trt", ".ort")

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# TensorProto.DataType -> the dtype names the backends report
_ELEM_TYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}
# Wire types of the ModelProto / GraphProto fields this reader relies on: a different one is corruption.
_MODEL_FIELDS = {1: _VARINT, 7: _LEN, 8: _LEN, 14: _LEN}
_GRAPH_FIELDS = {1: _LEN, 5: _LEN, 11: _LEN, 12: _LEN, 15: _LEN}


class _UnreadableError(Exception):
    """The bytes are not a valid protobuf message (``truncated``: they end inside a field)."""

    def __init__(self, message: str, *, truncated: bool = False) -> None:
        super().__init__(message)
        self.truncated = truncated


@dataclass(frozen=True)
class GraphTensor:
    """A graph input or output; ``shape`` is None when the graph does not declare it (-1: a dynamic dim)."""

    name: str
    shape: tuple[int, ...] | None
    dtype: str


@dataclass(frozen=True)
class ModelInterface:
    """What an ONNX file says about itself without running it: its real inputs and outputs, the
    ``metadata_props`` its exporter wrote (Ultralytics puts ``names``, ``imgsz``, ``task`` ... there) and
    the version of the default operator set it imports (0 when it imports none by that domain)."""

    inputs: tuple[GraphTensor, ...]
    outputs: tuple[GraphTensor, ...]
    metadata: dict[str, str]
    opset: int


class _Tensor(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...] | None: ...
    @property
    def dtype(self) -> str: ...


class _Reader:
    """Walks the fields of one message in ``buf[start:end]``."""

    def __init__(self, buf: bytes | mmap.mmap, start: int, end: int, names: dict[int, str] | None = None) -> None:
        self.buf, self.pos, self.end = buf, start, end
        self.names = names or {}  # what the fields are, for messages
        # Only the whole file can be cut short; a field overrunning the message around it is corruption.
        self.whole_file = start == 0 and end == len(buf)

    def _varint(self) -> int:
        result = shift = 0
        for _ in range(10):
            if self.pos >= self.end:
                raise _UnreadableError(f"a number runs past byte {self.end}", truncated=self.whole_file)
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        raise _UnreadableError(f"a number longer than 10 bytes at byte {self.pos - 10}")

    def fields(self) -> Iterator[tuple[int, int, int]]:
        """(field number, wire type, value): the value of a varint, or the start of a length-delimited
        field (its end is ``self.pos`` once yielded) or of a fixed-width one."""
        while self.pos < self.end:
            at = self.pos
            tag = self._varint()
            field, wire = tag >> 3, tag & 7
            if field == 0:
                raise _UnreadableError(f"field number 0 at byte {at}")
            if wire == _VARINT:
                yield field, wire, self._varint()
                continue
            if wire == _LEN:
                size = self._varint()
            elif wire in (_I64, _I32):
                size = 8 if wire == _I64 else 4
            else:
                raise _UnreadableError(f"invalid protobuf wire type {wire} at byte {at}")
            start = self.pos
            if start + size > self.end:
                raise _UnreadableError(
                    f"{self.names.get(field, f'field {field}')} at byte {at} needs {size} bytes, "
                    f"{self.end - start} remain",
                    truncated=self.whole_file,
                )
            self.pos = start + size
            yield field, wire, start


def _expect(field: int, wire: int, known: dict[int, int], what: str) -> None:
    want = known.get(field)
    if want is not None and want != wire:
        raise _UnreadableError(f"{what} field {field} has wire type {wire}, not {want}")


def _sub(r: _Reader, start: int, names: dict[int, str] | None = None) -> _Reader:
    """The message in the length-delimited field that ``r`` just yielded."""
    return _Reader(r.buf, start, r.pos, names)


def _text(r: _Reader, start: int) -> str:
    try:
        return bytes(r.buf[start : r.pos]).decode("utf-8")
    except UnicodeDecodeError:
        raise _UnreadableError(f"a name at byte {start} is not UTF-8") from None


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _shape(r: _Reader) -> tuple[int, ...]:
    dims = []
    for field, wire, value in r.fields():
        if field == 1 and wire == _LEN:  # Dimension: dim_value (1) or dim_param (2)
            dim = -1
            for f, w, v in _sub(r, value).fields():
                if f == 1 and w == _VARINT:
                    dim = _signed(v)
            dims.append(dim if dim > 0 else -1)  # as ONNX Runtime reports it: unknown or 0 is -1
    return tuple(dims)


def _value_info(r: _Reader) -> GraphTensor:
    """ValueInfoProto: name (1), type (2) -> TypeProto.tensor_type (1) -> elem_type (1), shape (2)."""
    name, dtype, shape = "", "not a tensor", None
    for field, wire, value in r.fields():
        if field == 1 and wire == _LEN:
            name = _text(r, value)
        elif field == 2 and wire == _LEN:
            tr = _sub(r, value)
            for f, w, v in tr.fields():
                if f == 1 and w == _LEN:
                    dtype = "undefined"
                    tt = _sub(tr, v)
                    for f2, w2, v2 in tt.fields():
                        if f2 == 1 and w2 == _VARINT:
                            dtype = _ELEM_TYPES.get(v2, f"ONNX type {v2}")
                        elif f2 == 2 and w2 == _LEN:
                            shape = _shape(_sub(tt, v2))
    if not name:
        raise _UnreadableError("a graph input or output has no name")
    return GraphTensor(name, shape, dtype)


def _tensor_name(r: _Reader) -> str:
    """TensorProto.name (8); the other fields (the weights among them) are only stepped over."""
    name = ""
    for field, wire, value in r.fields():
        if field == 8 and wire == _LEN:
            name = _text(r, value)
    return name


def _node(r: _Reader) -> None:
    """NodeProto: every field well formed, and an operator type (4)."""
    at, op_type = r.pos, False
    for field, wire, value in r.fields():
        if field == 4 and wire == _LEN and r.pos > value:
            op_type = True
    if not op_type:
        raise _UnreadableError(f"the node at byte {at} has no operator type")


def _graph(r: _Reader) -> tuple[list[GraphTensor], list[GraphTensor]]:
    inputs: list[GraphTensor] = []
    outputs: list[GraphTensor] = []
    initializers: set[str] = set()
    for field, wire, value in r.fields():
        _expect(field, wire, _GRAPH_FIELDS, "GraphProto")
        if field == 1:
            _node(_sub(r, value))
        elif field == 5:
            initializers.add(_tensor_name(_sub(r, value)))
        elif field == 15:  # SparseTensorProto.values (1) carries the name
            sr = _sub(r, value)
            for f, w, v in sr.fields():
                if f == 1 and w == _LEN:
                    initializers.add(_tensor_name(_sub(sr, v)))
        elif field == 11:
            inputs.append(_value_info(_sub(r, value)))
        elif field == 12:
            outputs.append(_value_info(_sub(r, value)))
    # Before IR version 4 every initializer was also listed as an input; ONNX Runtime does not count them.
    return [i for i in inputs if i.name not in initializers], outputs


def _entry(r: _Reader) -> tuple[str, str]:
    """StringStringEntryProto (a metadata_props item): key (1), value (2)."""
    key = value = ""
    for field, wire, start in r.fields():
        if field == 1 and wire == _LEN:
            key = _text(r, start)
        elif field == 2 and wire == _LEN:
            value = _text(r, start)
    return key, value


def _opset(r: _Reader) -> tuple[str, int]:
    """OperatorSetIdProto: domain (1), version (2)."""
    domain, version = "", 0
    for field, wire, value in r.fields():
        if field == 1 and wire == _LEN:
            domain = _text(r, value)
        elif field == 2 and wire == _VARINT:
            version = value
    return domain, version


def _model(buf: bytes | mmap.mmap) -> ModelInterface:
    r = _Reader(buf, 0, len(buf), {7: "the graph", 8: "an opset import", 14: "a metadata entry"})
    ir_version = 0
    opsets: dict[str, int] = {}
    metadata: dict[str, str] = {}
    graph: tuple[list[GraphTensor], list[GraphTensor]] | None = None
    try:
        for field, wire, value in r.fields():
            _expect(field, wire, _MODEL_FIELDS, "ModelProto")
            if field == 1:
                ir_version = value
            elif field == 8:
                domain, version = _opset(_sub(r, value))
                opsets[domain] = version
            elif field == 14:
                key, text = _entry(_sub(r, value))
                metadata[key] = text
            elif field == 7:
                graph = _graph(_sub(r, value, {1: "a node", 5: "a weight", 11: "an input", 12: "an output"}))
    except _UnreadableError as exc:
        if exc.truncated and not ir_version:  # writers put ir_version first: these bytes were never ONNX
            raise _UnreadableError(f"{exc} (and no ir_version before it)") from None
        raise
    if ir_version <= 0:
        raise _UnreadableError("it has no ir_version")
    if graph is None:
        raise _UnreadableError("it has no graph")
    if not opsets:
        raise _UnreadableError("it imports no operator set")
    opset = opsets.get("", opsets.get("ai.onnx", 0))
    return ModelInterface(tuple(graph[0]), tuple(graph[1]), metadata, opset)


def read_graph_interface(path: Path) -> tuple[list[GraphTensor], list[GraphTensor]]:
    """The graph's real inputs (initializers left out) and its outputs, read from the ONNX file at ``path``.

    Raises :class:`ModelPackageError` saying why when the file is not a readable ONNX model."""
    info = _read(path, str(path))
    return list(info.inputs), list(info.outputs)


def read_model_interface(path: Path) -> ModelInterface:
    """Inputs, outputs, metadata and opset of the ONNX file at ``path`` (see :class:`ModelInterface`).

    Raises :class:`ModelPackageError` saying why when the file is not a readable ONNX model."""
    return _read(path, str(path))


def _read(path: Path, name: str) -> ModelInterface:
    try:
        with path.open("rb") as f:
            if f.seek(0, 2) == 0:
                raise ModelPackageError(f"{name} is empty, not an ONNX model")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _model(buf)
    except OSError as exc:
        raise ModelPackageError(f"{name}: cannot read the model: {exc.strerror}") from None
    except _UnreadableError as exc:
        if exc.truncated:
            raise ModelPackageError(f"{name} is truncated, not a whole ONNX model: {exc}") from None
        raise ModelPackageError(f"{name} is not a valid ONNX model: {exc}") from None


def _dims_agree(declared: tuple[int, ...], real: tuple[int, ...]) -> bool:
    if len(declared) != len(real):
        return False
    return all(d == -1 or r in (-1, d) for d, r in zip(declared, real, strict=True))


def _layout_hint(layout: str, real: tuple[int, ...]) -> str:
    """Why the shapes differ when the model's input has its 3 colour channels where the other layout
    keeps them."""
    if len(real) != 4:
        return ""
    at, other, name = (1, 3, "NHWC") if layout == "NCHW" else (3, 1, "NCHW")
    if real[other] == 3 and real[at] != 3:
        return f" (input.layout is {layout}, but the model's input is {name}: channels at dimension {other})"
    return ""


def check_tensors(manifest: Manifest, inputs: Sequence[_Tensor], outputs: Sequence[_Tensor], source: str) -> None:
    """Refuse a model whose tensors contradict its manifest, naming both sides. A shape of None (not
    declared in the graph) is not compared; the input is ``inputs[0]``."""
    spec = manifest.input
    real_in = inputs[0]
    if real_in.name != spec.name:
        raise ModelMismatchError(f"{source}: manifest input is {spec.name!r}, the model's is {real_in.name!r}")
    if real_in.shape is not None and not _dims_agree(spec.shape, real_in.shape):
        raise ModelMismatchError(
            f"{source}: manifest input {spec.name} has shape {list(spec.shape)}, the model's is "
            f"{list(real_in.shape)}{_layout_hint(spec.layout, real_in.shape)}"
        )
    if real_in.dtype != spec.dtype:
        raise ModelMismatchError(f"{source}: manifest input dtype is {spec.dtype}, the model's is {real_in.dtype}")
    real_out = {o.name: o for o in outputs}
    for out in manifest.outputs:
        r = real_out.get(out.name)
        if r is None:
            raise ModelMismatchError(
                f"{source}: manifest output {out.name!r} is not a model output (the model has {sorted(real_out)})"
            )
        if r.shape is not None and not _dims_agree(out.shape, r.shape):
            raise ModelMismatchError(
                f"{source}: manifest output {out.name} has shape {list(out.shape)}, the model's is {list(r.shape)}"
            )


def check_dry_run(manifest: Manifest, outputs: Mapping[str, Any], source: str) -> dict[str, tuple[int, ...]]:
    """Compare the output shapes of a real run with the manifest: a dimension the graph leaves symbolic
    (an exporter's ``anchors``) is only known once the model ran, and the manifest's figure for it must
    be right (a decoder sizes its work from it). The batch dimension is not compared (a dry run has one
    row). Returns every output's shape as run, its batch dimension as -1."""
    real: dict[str, tuple[int, ...]] = {}
    for name, value in outputs.items():
        shape = tuple(int(d) for d in getattr(value, "shape", ()))
        real[name] = (-1, *shape[1:]) if shape else shape
    for out in manifest.outputs:
        got = real.get(out.name)
        if got is None:
            continue
        if len(got) != len(out.shape) or any(d not in (-1, g) for d, g in zip(out.shape[1:], got[1:], strict=False)):
            raise ModelMismatchError(
                f"{source}: manifest output {out.name} has shape {list(out.shape)}, the model's is {list(got)} "
                "when it runs (the graph leaves that dimension symbolic; declare what the model produces)"
            )
    return real


def check_model_file(
    root: Path, manifest: Manifest, source: str | None = None, labels: Sequence[str] | None = None
) -> None:
    """Check the package's model file without running it: a readable ONNX model with one image input whose
    inputs and outputs match the manifest, and a decoder that fits those outputs (:func:`check_decoder`).
    A TensorRT engine or ``.ort`` file is left to the agent.

    ``source`` names the package in messages (default: ``root``). Raises :class:`ModelPackageError`
    (unreadable model), :class:`ModelMismatchError` (tensors contradict the manifest) or
    :class:`DecoderError` (the decoder's parameters do not fit)."""
    where = str(root) if source is None else source
    if manifest.model.lower().endswith(ENGINE_SUFFIXES):
        return
    info = _read(root / manifest.model, f"{where}: {manifest.model}")
    inputs, outputs = info.inputs, info.outputs
    if len(inputs) != 1:
        raise ModelMismatchError(
            f"{where}: {manifest.model} must take one image input, it takes {len(inputs)} "
            f"({', '.join(i.name for i in inputs) or 'none'})"
        )
    check_tensors(manifest, inputs, outputs, f"{where}: {manifest.model}")
    check_decoder(manifest, labels, outputs)


def check_decoder(manifest: Manifest, labels: Sequence[str] | None, outputs: Sequence[_Tensor]) -> None:
    """Build the manifest's decoder against the model's real outputs, as loading it would: its parameters
    (strict), the outputs it reads and how they fit the head. A decoder type this process does not know
    (an application's own, registered where the model runs) is left to the device. ``labels``: the
    package's, when they are at hand (None: the label count is not checked)."""
    from ._decoders import DecodeContext, build_decoder, decoder_names

    if manifest.decoder.type not in decoder_names():
        return
    build_decoder(
        DecodeContext(
            params=manifest.decoder.params(),
            manifest=manifest,
            labels=tuple(labels or ()),
            output_names=tuple(o.name for o in outputs),
            output_shapes={o.name: (-1, *o.shape[1:]) for o in outputs if o.shape},
        )
    )
