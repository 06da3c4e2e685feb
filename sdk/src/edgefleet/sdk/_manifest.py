"""The model package manifest (``manifest.yaml``): a strict pydantic schema.

A package is a directory (or a tar of one) holding ``manifest.yaml`` and the files it lists. The manifest
says how to feed the model (input spec), what comes out (output specs), how to decode it (decoder), the
class labels, the sha256 and size of every file, optional prebuilt engines per target, an optional
golden sample, and an optional Ed25519 signature over the canonical form of everything else.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from ._errors import ManifestError
from ._names import NAME_RE as _NAME_RE
from ._registry import PluginConfig, registry
from ._validation import format_validation_error
from ._yaml import yaml_problem

__all__ = [
    "FORMAT",
    "DecoderSpec",
    "EngineSpec",
    "FileEntry",
    "GoldenSpec",
    "InputSpec",
    "Manifest",
    "OutputSpec",
    "QuantizationSpec",
    "SignatureSpec",
    "canonical_bytes",
    "format_validation_error",
    "parse_manifest",
    "read_manifest",
]

FORMAT = "edgefleet.model/v1"
# Semantic Versioning 2.0.0 (major.minor.patch[-pre][+build]).
_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")


def _sha256(v: str) -> str:
    if not _SHA256_RE.match(v):
        raise ValueError("must be 64 lowercase hex digits")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # "should be a finite number"


def _relative_file(value: str) -> str:
    p = Path(value)
    if not value or p.is_absolute() or ".." in p.parts or value.startswith(("/", "\\")):
        raise ValueError(f"must be a relative path inside the package, got {value!r}")
    return p.as_posix()


class InputSpec(_Strict):
    """How frames are turned into the model's input tensor."""

    name: str = Field(description="Name of the model's input tensor")
    shape: tuple[int, int, int, int] = Field(description="Tensor shape; -1 marks a dynamic dimension")
    dtype: Literal["float32", "float16", "uint8"] = "float32"
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    color: Literal["BGR", "RGB"] = "RGB"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    resize: Literal["letterbox", "stretch", "center_crop"] = Field(
        "letterbox",
        description="letterbox: fit inside, aspect kept, padded; stretch: to the input size; center_crop: "
        "fill the input, aspect kept, the centre cut out (classifiers trained that way)",
    )
    pad_value: float = Field(0.0, description="Raw pixel value of the letterbox padding")

    @field_validator("shape")
    @classmethod
    def _check_shape(cls, v: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        if any(d == 0 or d < -1 for d in v):
            raise ValueError("dimensions must be positive, or -1 for dynamic")
        return v

    @field_validator("std")
    @classmethod
    def _check_std(cls, v: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(s == 0 for s in v):
            raise ValueError("std must not contain 0")
        return v

    @model_validator(mode="after")
    def _check_layout(self) -> InputSpec:
        """Frames have 3 channels, so the layout's channel dimension must be 3, and the preprocessing
        needs a fixed height and width. A layout that does not fit the shape (NCHW declared for an NHWC
        model) would otherwise feed the model scrambled pixels and give wrong results without a word."""
        nchw = self.layout == "NCHW"
        at, other = (1, 3) if nchw else (3, 1)
        if self.shape[at] != 3:
            hint = ""
            if self.shape[other] == 3:
                hint = f" (dimension {other} is 3: is the model {'NHWC' if nchw else 'NCHW'}?)"
            raise ValueError(
                f"layout {self.layout} puts the colour channels at dimension {at} of {list(self.shape)}, "
                f"which is {self.shape[at]}; frames have 3 channels{hint}"
            )
        if self.height < 1 or self.width < 1:
            raise ValueError(
                f"height and width must be fixed numbers (the frames are resized to them), got {list(self.shape)}"
            )
        return self

    @property
    def height(self) -> int:
        return self.shape[2] if self.layout == "NCHW" else self.shape[1]

    @property
    def width(self) -> int:
        return self.shape[3] if self.layout == "NCHW" else self.shape[2]

    @property
    def channels(self) -> int:
        return self.shape[1] if self.layout == "NCHW" else self.shape[3]

    @property
    def fixed_batch(self) -> int | None:
        """The batch size the model requires, or None when the batch dimension is dynamic."""
        return None if self.shape[0] == -1 else self.shape[0]


class OutputSpec(_Strict):
    name: str
    shape: tuple[int, ...]


class DecoderSpec(BaseModel):
    """Selects the decoder by ``type``; the remaining keys are that decoder's parameters.

    The mapping is kept as written (the signature covers it); when this installation knows the decoder
    (built in, an installed plugin, or registered in-process), its parameters are validated against the
    decoder's config when the manifest is read, and :attr:`config` holds the result. A decoder it does
    not know is checked when a pipeline builds it.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    type: str
    _config: PluginConfig | None = PrivateAttr(None)

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def config(self) -> PluginConfig | None:
        """The validated config of the decoder (a ``DecoderConfig``), None when it is not known here."""
        return self._config


class FileEntry(_Strict):
    sha256: str
    size: int = Field(ge=0)

    @field_validator("sha256")
    @classmethod
    def _check_sha(cls, v: str) -> str:
        return _sha256(v)


class EngineSpec(_Strict):
    """A prebuilt engine for one target (e.g. ``sm90-trt10.3-fp16``)."""

    file: str
    precision: Literal["fp32", "fp16", "int8"] = "fp16"
    tensorrt: str | None = None

    @field_validator("file")
    @classmethod
    def _check_file(cls, v: str) -> str:
        return _relative_file(v)


class GoldenSpec(_Strict):
    """A golden sample: an input tensor and the outputs the model must reproduce (npz files)."""

    inputs: str
    outputs: str
    atol: float = 1e-3
    rtol: float = 1e-3

    @field_validator("inputs", "outputs")
    @classmethod
    def _check_files(cls, v: str) -> str:
        return _relative_file(v)


class QuantizationSpec(_Strict):
    """How an INT8 version was made from its FP32 source and how close it stayed (``models quantize``).

    ``recall`` / ``precision``: detections of the source matched by this version's (same class, IoU >=
    0.5) over the source's, and over this version's, on ``held_out_frames`` frames not used in
    calibration; ``top1_agreement`` for a classifier (and over the frames FP32 is sure of). ``thresholds``:
    the minimums it was held to."""

    method: Literal["onnxruntime-static-qdq"] = "onnxruntime-static-qdq"
    tool: str = Field(description="The quantizer and its version, e.g. onnxruntime 1.32.0")
    weights: Literal["int8", "int7"] = Field(
        "int8",
        description="int7: INT8 weights using 7 bits (ONNX Runtime's reduce_range; no saturation on x86 without VNNI)",
    )
    activations: Literal["uint8", "int8"] = "uint8"
    calibration_method: str
    source: str = Field(description="name:version of the FP32 package")
    source_sha256: str = Field(description="sha256 of the FP32 model file")
    calibration: str = Field(description="What it was calibrated on (file or folder name)")
    checked_on: str = Field(description="What the held-out frames came from (file or folder name)")
    calibration_frames: int = Field(ge=1)
    held_out_frames: int = Field(ge=1)
    recall: float | None = Field(None, ge=0, le=1)
    precision: float | None = Field(None, ge=0, le=1)
    top1_agreement: float | None = Field(None, ge=0, le=1)
    top1_agreement_confident: float | None = Field(
        None, ge=0, le=1, description="top1_agreement over the frames where FP32's best score is >= 0.5"
    )
    thresholds: dict[str, float] = Field(default_factory=dict)
    left_in_float: tuple[str, ...] = Field((), description="Nodes kept in floating point, and why not INT8")

    @field_validator("source_sha256")
    @classmethod
    def _check_sha(cls, v: str) -> str:
        return _sha256(v)


class SignatureSpec(_Strict):
    algorithm: Literal["ed25519"] = "ed25519"
    key_id: str
    value: str = Field(description="base64 Ed25519 signature over canonical_bytes(manifest)")


class Manifest(_Strict):
    """A validated ``manifest.yaml``."""

    format: Literal["edgefleet.model/v1"]
    name: str
    version: str
    task: Literal["detection", "segmentation", "pose", "classification", "raw"]
    description: str = ""
    license: str | None = None
    model: str
    input: InputSpec
    outputs: tuple[OutputSpec, ...] = Field(min_length=1)
    decoder: DecoderSpec
    labels: str | tuple[str, ...] | None = None
    files: dict[str, FileEntry] = Field(min_length=1)
    engines: dict[str, EngineSpec] = Field(default_factory=dict)
    golden: GoldenSpec | None = None
    quantization: QuantizationSpec | None = None
    signature: SignatureSpec | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError("must match [a-z0-9][a-z0-9._-]{0,63}")
        return v

    @field_validator("version")
    @classmethod
    def _check_version(cls, v: str) -> str:
        if not _SEMVER_RE.match(v):
            raise ValueError(f"must be a semantic version like 1.2.3, got {v!r}")
        return v

    @field_validator("model")
    @classmethod
    def _check_model(cls, v: str) -> str:
        return _relative_file(v)

    @field_validator("decoder")
    @classmethod
    def _check_decoder(cls, v: DecoderSpec) -> DecoderSpec:
        """Through the decoder registry: ``decoder (yolo): reg_max: ...`` for a parameter that does not fit."""
        decoders = registry("decoder")
        if decoders.get(v.type) is not None:
            v._config = decoders.coerce({**v.params(), "type": v.type})
        return v

    @field_validator("files")
    @classmethod
    def _check_files(cls, v: dict[str, FileEntry]) -> dict[str, FileEntry]:
        for key in v:
            if _relative_file(key) != key:
                raise ValueError(f"file key {key!r} must be a normalised relative path")
            if key == "manifest.yaml":
                raise ValueError("manifest.yaml must not list itself")
        return v

    @model_validator(mode="after")
    def _check_references(self) -> Manifest:
        listed = set(self.files)
        refs = [("model", self.model)]
        if isinstance(self.labels, str):
            refs.append(("labels", _relative_file(self.labels)))
        refs += [(f"engines.{k}.file", e.file) for k, e in self.engines.items()]
        if self.golden is not None:
            refs += [("golden.inputs", self.golden.inputs), ("golden.outputs", self.golden.outputs)]
        for field, ref in refs:
            if ref not in listed:
                raise ValueError(f"{field} refers to {ref!r}, which is not listed under files")
        names = [o.name for o in self.outputs]
        if len(set(names)) != len(names):
            raise ValueError("output names must be unique")
        wants = getattr(self.decoder.config, "task", None)  # a decoder config's task: None serves any
        if wants is not None and self.task != wants:
            raise ValueError(f"task {self.task!r} does not match decoder {self.decoder.type!r}, which does {wants}")
        return self

    @property
    def ref(self) -> str:
        """``name:version``, the way the CLI and results name a model."""
        return f"{self.name}:{self.version}"

    def unsigned_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude_none=True)
        data.pop("signature", None)
        return data


def canonical_bytes(manifest: Manifest) -> bytes:
    """The exact bytes a signature covers: the manifest without ``signature`` as canonical JSON.

    Canonical means keys sorted, no insignificant whitespace, UTF-8. The file hashes are inside, so
    the signature covers every file of the package.
    """
    return json.dumps(manifest.unsigned_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def parse_manifest(data: object, source: str) -> Manifest:
    """Validate an already-loaded manifest mapping; errors name ``source`` and the field."""
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise ManifestError(format_validation_error(exc, source)) from None


def read_manifest(path: Path) -> Manifest:
    """Read and validate ``manifest.yaml`` at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{path}: no manifest.yaml (is this a model package?)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read manifest: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: {yaml_problem(exc)}") from None
    return parse_manifest(data, str(path))
