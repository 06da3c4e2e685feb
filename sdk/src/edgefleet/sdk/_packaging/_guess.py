"""What a plain ONNX model is, read from its file: an Ultralytics export by the metadata it carries, or the
common layouts by their shapes. The result is a draft manifest and a list of what was found, what was
guessed and what the user must confirm.

Ultralytics writes ``names``, ``imgsz``, ``stride``, ``task``, ``batch``, ``kpt_shape`` (pose) and more into
``metadata_props``; its predictor feeds the model RGB / 255 in NCHW, letterboxed with grey (114) padding
(detect, segment, pose), or resized on the short side and centre-cropped (classify, ``classify_transforms``
with mean 0 and std 1), and its post-processing is what the ``yolo``, ``yolo-seg``, ``yolo-pose`` and
``classification`` decoders do by default.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from .._errors import ModelPackageError
from .._onnx_check import GraphTensor, ModelInterface

__all__ = ["Draft", "Note", "guess_manifest"]

_ULTRALYTICS_TASKS = {"detect": "yolo", "segment": "yolo-seg", "pose": "yolo-pose", "classify": "classification"}
_TASK_OF_DECODER = {
    "yolo": "detection",
    "yolo-seg": "segmentation",
    "yolo-pose": "pose",
    "nanodet": "detection",
    "classification": "classification",
    "raw": "raw",
}
_ULTRALYTICS_INPUT = {"color": "RGB", "mean": [0, 0, 0], "std": [255, 255, 255], "pad_value": 114}


@dataclass(frozen=True)
class Note:
    """One line of what ``models init`` says: ``found`` (read from the file), ``guessed`` (a default or a
    reading of the shapes: confirm it) or ``confirm`` (nothing to go on: check it before deploying)."""

    kind: str
    text: str


@dataclass
class Draft:
    """A manifest before its files are hashed: the fields, the labels the file names, and the notes."""

    fields: dict[str, Any]
    labels: list[str] | None
    notes: list[Note] = field(default_factory=list)

    def note(self, kind: str, text: str) -> None:
        self.notes.append(Note(kind, text))


def _literal(meta: dict[str, str], key: str) -> Any:
    """A Python literal Ultralytics wrote (``{0: 'person', ...}``, ``[640, 640]``), or None."""
    text = meta.get(key)
    if text is None:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _names(meta: dict[str, str]) -> list[str] | None:
    names = _literal(meta, "names")
    if isinstance(names, dict) and all(isinstance(k, int) for k in names):
        return [str(names[i]) if i in names else str(i) for i in range(max(names) + 1)] if names else None
    if isinstance(names, list):
        return [str(n) for n in names]
    return None


def _imgsz(meta: dict[str, str], given: tuple[int, int] | None) -> tuple[tuple[int, int] | None, str]:
    """The image size (height, width) and where it came from."""
    if given is not None:
        return given, "--imgsz"
    size = _literal(meta, "imgsz")
    if isinstance(size, int):
        return (size, size), "the export's metadata"
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(v, int) for v in size):
        return (int(size[0]), int(size[1])), "the export's metadata"
    return None, ""


def _input(draft: Draft, t: GraphTensor, imgsz: tuple[tuple[int, int] | None, str]) -> dict[str, Any]:
    """Layout, shape and dtype of the image input; height and width from the graph, else ``imgsz``."""
    shape = list(t.shape or ())
    if len(shape) != 4:
        raise ModelPackageError(
            f"input {t.name!r} has shape {shape or 'unknown'}; edgefleet feeds images: (N, 3, H, W) or (N, H, W, 3)"
        )
    if t.dtype not in ("float32", "float16", "uint8"):
        raise ModelPackageError(f"input {t.name!r} is {t.dtype}; images go in as float32, float16 or uint8")
    if shape[1] == 3:
        layout = "NCHW"
    elif shape[3] == 3:
        layout = "NHWC"
    else:
        layout = "NCHW"
        draft.note("confirm", f"input {t.name} {shape}: no dimension of 3 colour channels; NCHW assumed")
    hw = [shape[2], shape[3]] if layout == "NCHW" else [shape[1], shape[2]]
    size, origin = imgsz
    if any(d < 1 for d in hw):
        if size is None:
            raise ModelPackageError(
                f"input {t.name!r} has a dynamic height or width ({shape}) and the file does not say its "
                "image size: give it with --imgsz HEIGHTxWIDTH"
            )
        draft.note("found", f"input {size[0]} x {size[1]} (height x width, from {origin}; the graph leaves it dynamic)")
        hw = list(size)
    elif size is not None and origin == "--imgsz" and list(size) != hw:
        raise ModelPackageError(f"--imgsz {size[0]}x{size[1]}: the model's input is fixed at {hw[0]}x{hw[1]}")
    if shape[0] != -1 and shape[0] != 1:
        draft.note("found", f"the model takes batches of exactly {shape[0]}")
    full = [shape[0], 3, *hw] if layout == "NCHW" else [shape[0], *hw, 3]
    return {"name": t.name, "shape": full, "dtype": t.dtype, "layout": layout}


def _by_name(outputs: tuple[GraphTensor, ...]) -> dict[str, tuple[int, ...]]:
    return {o.name: tuple(o.shape or ()) for o in outputs}


def _ultralytics(draft: Draft, info: ModelInterface, labels: list[str] | None) -> dict[str, Any]:
    meta = info.metadata
    task = meta.get("task", "")
    decoder = _ULTRALYTICS_TASKS.get(task)
    if decoder is None:
        raise ModelPackageError(
            f"an Ultralytics {task or 'unknown-task'} export; edgefleet decodes detect, segment, pose and classify"
        )
    if meta.get("end2end", "False") == "True":
        raise ModelPackageError(
            "an end-to-end (NMS-free) Ultralytics export: its output already holds the final boxes, which no "
            "built-in decoder reads yet; export with nms=False (the default for YOLOv8/YOLO11)"
        )
    spec: dict[str, Any] = {"type": decoder}
    outs = info.outputs
    if decoder == "yolo-seg":
        protos = [o for o in outs if o.shape is not None and len(o.shape) == 4]
        if len(outs) != 2 or len(protos) != 1:
            raise ModelPackageError(f"a segment export with outputs {_by_name(outs)}; expected boxes and prototypes")
        spec["protos"] = protos[0].name
    if decoder == "yolo-pose":
        kpt = _literal(meta, "kpt_shape")
        if isinstance(kpt, (list, tuple)) and len(kpt) == 2:
            spec["kpt_shape"] = [int(kpt[0]), int(kpt[1])]
            draft.note("found", f"{kpt[0]} keypoints of {kpt[1]} values")
    if decoder == "classification":
        spec.update(softmax=False, top_k=5)  # the exported Classify head applies softmax itself
        draft.note("found", "the classifier's output is already softmax-ed (Ultralytics' Classify head)")
    else:
        draft.note(
            "found",
            "Ultralytics' post-processing defaults: score 0.25, IoU 0.7, class-aware NMS, at most 300 detections",
        )
    names = _names(meta)
    if labels is None and names is not None:
        draft.labels = names
        if all(n == str(i) for i, n in enumerate(names)):
            draft.note("confirm", f"the export names its {len(names)} classes only by number: give --labels")
        else:
            draft.note("found", f"{len(names)} class names ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
    return spec


def _nanodet(draft: Draft, outs: dict[str, tuple[int, ...]]) -> dict[str, Any] | None:
    """cls_<stride> / reg_<stride> pairs: a GFL head."""
    strides = sorted(int(m.group(1)) for n in outs if (m := re.fullmatch(r"cls_(\d+)", n)))
    if not strides or any(f"reg_{s}" not in outs for s in strides) or len(outs) != 2 * len(strides):
        return None
    bins = outs[f"reg_{strides[0]}"][-1]
    if bins < 4 or bins % 4:
        return None
    draft.note(
        "guessed", f"a NanoDet-style GFL head: strides {strides}, reg_max {bins // 4 - 1} (from the output names)"
    )
    return {"type": "nanodet", "strides": strides, "reg_max": bins // 4 - 1}


def _by_shape(draft: Draft, info: ModelInterface, labels: list[str] | None) -> dict[str, Any]:
    outs = _by_name(info.outputs)
    nano = _nanodet(draft, outs)
    if nano is not None:
        return nano
    three = {n: s for n, s in outs.items() if len(s) == 3}
    four = {n: s for n, s in outs.items() if len(s) == 4}
    n_labels = len(labels) if labels else None
    if len(outs) == 1:
        ((name, shape),) = outs.items()
        if len(shape) == 2 or (len(shape) == 4 and shape[2:] == (1, 1)):
            draft.note("guessed", f"a classifier: output {name} {list(shape)} read as one score per class")
            draft.note("confirm", "softmax: true assumed (the output read as logits); set false if it is probabilities")
            return {"type": "classification", "top_k": 5, "softmax": True}
    if len(three) == 1 and len(outs) in (1, 2):
        ((name, shape),) = three.items()
        channels_first = shape[1] > 0 and (shape[2] == -1 or shape[1] < shape[2])
        width = shape[1] if channels_first else shape[2]
        layout = "(N, 4 + C, anchors)" if channels_first else "(N, anchors, 4 + C)"
        if len(outs) == 2 and len(four) == 1:
            ((pname, pshape),) = four.items()
            draft.note(
                "guessed",
                f"a YOLO segmentation head: {name} {layout} with {pshape[1]} mask coefficients, prototypes {pname}",
            )
            return {"type": "yolo-seg", "protos": pname}
        if len(outs) == 1 and width > 4:
            extra = width - 4 - n_labels if n_labels is not None else 0
            if n_labels is not None and extra > 0 and extra % 3 == 0:
                draft.note(
                    "guessed", f"a YOLO pose head: {name} {layout}, {n_labels} classes and {extra // 3} keypoints"
                )
                return {"type": "yolo-pose", "kpt_shape": [extra // 3, 3]}
            draft.note(
                "guessed", f"a YOLO detection head: {name} {layout} with {width - 4} class scores (no objectness)"
            )
            return {"type": "yolo"}
    draft.note("confirm", f"outputs {outs} fit no built-in decoder: decoder raw (each result carries the tensors)")
    return {"type": "raw"}


def guess_manifest(
    info: ModelInterface,
    *,
    model_file: str,
    name: str,
    version: str,
    labels: list[str] | None,
    imgsz: tuple[int, int] | None,
) -> Draft:
    """The draft manifest for the model ``info`` describes (see the module's docstring)."""
    if len(info.inputs) != 1:
        raise ModelPackageError(
            f"the model takes {len(info.inputs)} inputs ({', '.join(i.name for i in info.inputs)}); "
            "edgefleet feeds one image"
        )
    draft = Draft(fields={}, labels=labels)
    if labels is not None:
        draft.note("found", f"{len(labels)} labels from --labels")
    meta = info.metadata
    ultralytics = "names" in meta and "task" in meta and "imgsz" in meta
    if ultralytics:
        what = meta.get("description", "").strip() or "no description"
        draft.note("found", f"an Ultralytics {meta['task']} export ({what}), by the metadata it carries")
    inp = _input(draft, info.inputs[0], _imgsz(meta, imgsz))
    decoder = _ultralytics(draft, info, labels) if ultralytics else _by_shape(draft, info, labels)
    if ultralytics:
        inp.update(_ULTRALYTICS_INPUT)
        inp["resize"] = "center_crop" if decoder["type"] == "classification" else "letterbox"
        draft.note(
            "found",
            f"Ultralytics' preprocessing: RGB / 255, {inp['resize']}"
            + (", grey (114) border" if inp["resize"] == "letterbox" else ""),
        )
    else:
        inp.update({"color": "RGB", "mean": [0, 0, 0], "std": [255, 255, 255], "resize": "letterbox", "pad_value": 114})
        if decoder["type"] == "nanodet":
            inp.update(
                {"color": "BGR", "mean": [103.53, 116.28, 123.675], "std": [57.375, 57.12, 58.395], "pad_value": 0}
            )
        draft.note(
            "confirm",
            f"preprocessing {inp['color']}, (x - {inp['mean']}) / {inp['std']}, {inp['resize']}: "
            "how the model was trained is not in the file",
        )
    fields: dict[str, Any] = {
        "format": "edgefleet.model/v1",
        "name": name,
        "version": version,
        "task": _TASK_OF_DECODER[decoder["type"]],
        "description": (meta.get("description") or f"{name}, made by edgefleet models init").strip(),
    }
    lic = meta.get("license", "").split(" ")[0]
    if lic:
        fields["license"] = lic
        draft.note("found", f"licence {lic} (from the export's metadata)")
    fields.update(
        model=model_file,
        input=inp,
        outputs=[{"name": o.name, "shape": list(o.shape or ())} for o in info.outputs],
        decoder=decoder,
    )
    draft.fields = fields
    return draft
