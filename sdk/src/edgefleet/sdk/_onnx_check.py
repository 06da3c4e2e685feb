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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ._errors import ModelMismatchError, ModelPackageError
from ._manifest import Manifest

__all__ = ["ENGINE_SUFFIXES", "GraphTensor", "check_model_file", "check_tensors", "read_graph_interface"]

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
_MODEL_FIELDS = {1: _VARINT, 7: _LEN, 8: _LEN}
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


def _model(buf: bytes | mmap.mmap) -> tuple[list[GraphTensor], list[GraphTensor]]:
    r = _Reader(buf, 0, len(buf), {7: "the graph", 8: "an opset import"})
    ir_version = 0
    opsets = 0
    graph: tuple[list[GraphTensor], list[GraphTensor]] | None = None
    try:
        for field, wire, value in r.fields():
            _expect(field, wire, _MODEL_FIELDS, "ModelProto")
            if field == 1:
                ir_version = value
            elif field == 8:
                opsets += 1
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
    if opsets == 0:
        raise _UnreadableError("it imports no operator set")
    return graph


def read_graph_interface(path: Path) -> tuple[list[GraphTensor], list[GraphTensor]]:
    """The graph's real inputs (initializers left out) and its outputs, read from the ONNX file at ``path``.

    Raises :class:`ModelPackageError` saying why when the file is not a readable ONNX model."""
    return _read(path, str(path))


def _read(path: Path, name: str) -> tuple[list[GraphTensor], list[GraphTensor]]:
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


def check_tensors(manifest: Manifest, inputs: Sequence[_Tensor], outputs: Sequence[_Tensor], source: str) -> None:
    """Refuse a model whose tensors contradict its manifest, naming both sides. A shape of None (not
    declared in the graph) is not compared; the input is ``inputs[0]``."""
    spec = manifest.input
    real_in = inputs[0]
    if real_in.name != spec.name:
        raise ModelMismatchError(f"{source}: manifest input is {spec.name!r}, the model's is {real_in.name!r}")
    if real_in.shape is not None and not _dims_agree(spec.shape, real_in.shape):
        raise ModelMismatchError(
            f"{source}: manifest input {spec.name} has shape {list(spec.shape)}, the model's is {list(real_in.shape)}"
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


def check_model_file(root: Path, manifest: Manifest, source: str | None = None) -> None:
    """Check the package's model file without running it: a readable ONNX model with one image input whose
    inputs and outputs match the manifest. A TensorRT engine or ``.ort`` file is left to the agent.

    ``source`` names the package in messages (default: ``root``). Raises :class:`ModelPackageError`
    (unreadable model) or :class:`ModelMismatchError` (tensors contradict the manifest)."""
    where = str(root) if source is None else source
    if manifest.model.lower().endswith(ENGINE_SUFFIXES):
        return
    inputs, outputs = _read(root / manifest.model, f"{where}: {manifest.model}")
    if len(inputs) != 1:
        raise ModelMismatchError(
            f"{where}: {manifest.model} must take one image input, it takes {len(inputs)} "
            f"({', '.join(i.name for i in inputs) or 'none'})"
        )
    check_tensors(manifest, inputs, outputs, f"{where}: {manifest.model}")
