"""Small ONNX models and model packages built in-process for tests (no downloads).

Each model's outputs depend on the input only through its batch size, so decoders can be tested
against known answers; ``identity`` returns its input so preprocessing can be checked numerically.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def constant_head_model(
    path: Path,
    const: np.ndarray,
    *,
    size: int = 64,
    input_name: str = "images",
    output_name: str = "output0",
    dynamic_batch: bool = True,
    layout: str = "NCHW",
    nan_above: float | None = None,
    symbolic_last_dim: bool = False,
) -> None:
    """Output = const broadcast over the batch: (N, *const.shape[1:]). ``const`` has a leading 1.
    ``symbolic_last_dim``: the graph declares its output's last dimension as a name (as exporters often
    do for a detector's anchors), so ONNX Runtime reports it as unknown until a run."""
    batch: Any = "batch" if dynamic_batch else 1
    shape = [batch, 3, size, size] if layout == "NCHW" else [batch, size, size, 3]
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, shape)
    out_shape: list[Any] = [batch, *const.shape[1:]]
    if symbolic_last_dim:
        out_shape[-1] = "anchors"
    y = helper.make_tensor_value_info(output_name, TensorProto.FLOAT, out_shape)
    rank = len(const.shape)
    nodes = [
        helper.make_node("ReduceMean", [input_name], ["m"], axes=[1, 2, 3], keepdims=1),  # (N,1,1,1)
        helper.make_node("Reshape", ["m", "rshape"], ["m2"]),  # (N, 1, ...)
        helper.make_node("Mul", ["m2", "zero"], ["z"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([-1] + [1] * (rank - 1), np.int64), "rshape"),
        numpy_helper.from_array(np.zeros((1,) * rank, np.float32), "zero"),
        numpy_helper.from_array(const.astype(np.float32), "const"),
    ]
    if symbolic_last_dim:
        # const's last dimension sliced to a length computed from the input's shape at run time: shape
        # inference cannot know it (the values are the same)
        last = const.shape[-1]
        nodes += [
            helper.make_node("Shape", [input_name], ["in_shape"]),
            helper.make_node("Slice", ["in_shape", "i1", "i2"], ["in_dim"]),  # channels (3)
            helper.make_node("Mul", ["in_dim", "last"], ["in_dim_x"]),
            helper.make_node("Div", ["in_dim_x", "three"], ["end"]),
            helper.make_node("Slice", ["const_padded", "zero_i", "end", "axis_last"], ["const_dyn"]),
        ]
        padded = np.concatenate([const, np.zeros((*const.shape[:-1], 4), const.dtype)], axis=-1)
        inits += [
            numpy_helper.from_array(np.array([1], np.int64), "i1"),
            numpy_helper.from_array(np.array([2], np.int64), "i2"),
            numpy_helper.from_array(np.array([last], np.int64), "last"),
            numpy_helper.from_array(np.array([3], np.int64), "three"),
            numpy_helper.from_array(np.array([0], np.int64), "zero_i"),
            numpy_helper.from_array(np.array([rank - 1], np.int64), "axis_last"),
            numpy_helper.from_array(padded.astype(np.float32), "const_padded"),
        ]
        const_name = "const_dyn"
    else:
        const_name = "const"
    if nan_above is None:
        nodes.append(helper.make_node("Add", ["z", const_name], [output_name]))
    else:
        # NaN wherever the mean input value exceeds nan_above: a model that breaks on some scenes only
        nodes += [
            helper.make_node("Greater", ["m2", "thr"], ["hot"]),
            helper.make_node("Where", ["hot", "nan", "z"], ["zn"]),
            helper.make_node("Add", ["zn", const_name], [output_name]),
        ]
        inits += [
            numpy_helper.from_array(np.full((1,) * rank, nan_above, np.float32), "thr"),
            numpy_helper.from_array(np.full((1,) * rank, np.nan, np.float32), "nan"),
        ]
    _save(helper.make_graph(nodes, "const_head", [x], [y], inits), path)


def constant_outputs_model(
    path: Path, consts: dict[str, np.ndarray], *, size: int = 64, input_name: str = "images"
) -> None:
    """Several outputs, each ``const`` broadcast over the batch (N, *const.shape[1:]); input (N, 3, size,
    size). For heads with more than one output (a segmentation model's boxes and prototypes)."""
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", 3, size, size])
    nodes = [helper.make_node("ReduceMean", [input_name], ["m"], axes=[1, 2, 3], keepdims=1)]
    inits, outs = [], []
    for name, const in consts.items():
        rank = const.ndim
        nodes += [
            helper.make_node("Reshape", ["m", f"{name}_rshape"], [f"{name}_m"]),
            helper.make_node("Mul", [f"{name}_m", f"{name}_zero"], [f"{name}_z"]),
            helper.make_node("Add", [f"{name}_z", f"{name}_const"], [name]),
        ]
        inits += [
            numpy_helper.from_array(np.array([-1] + [1] * (rank - 1), np.int64), f"{name}_rshape"),
            numpy_helper.from_array(np.zeros((1,) * rank, np.float32), f"{name}_zero"),
            numpy_helper.from_array(const.astype(np.float32), f"{name}_const"),
        ]
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", *const.shape[1:]]))
    _save(helper.make_graph(nodes, "const_outputs", [x], outs, inits), path)


def identity_model(path: Path, *, size: int = 32, input_name: str = "images", output_name: str = "out") -> None:
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", 3, size, size])
    y = helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["batch", 3, size, size])
    _save(
        helper.make_graph([helper.make_node("Identity", [input_name], [output_name])], "identity", [x], [y]),
        path,
    )


def yolo_const(
    num_classes: int, boxes: list[tuple[float, float, float, float, int, float]], anchors: int = 16
) -> np.ndarray:
    """(1, 4 + C, A) Ultralytics layout with the given (cx, cy, w, h, class, score) in the first anchors."""
    out = np.zeros((1, 4 + num_classes, anchors), np.float32)
    for a, (cx, cy, w, h, c, s) in enumerate(boxes):
        out[0, :4, a] = (cx, cy, w, h)
        out[0, 4 + c, a] = s
    return out


def write_package(
    root: Path,
    *,
    name: str,
    version: str,
    task: str,
    model_file: str = "model.onnx",
    input_spec: dict[str, Any],
    outputs: list[dict[str, Any]],
    decoder: dict[str, Any],
    labels: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write manifest.yaml (+ labels.txt) for the files already in ``root``, with real hashes."""
    if labels is not None:
        (root / "labels.txt").write_text("\n".join(labels) + "\n", encoding="utf-8")
    files = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != "manifest.yaml":
            data = p.read_bytes()
            files[p.relative_to(root).as_posix()] = {
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            }
    manifest: dict[str, Any] = {
        "format": "edgefleet.model/v1",
        "name": name,
        "version": version,
        "task": task,
        "model": model_file,
        "input": input_spec,
        "outputs": outputs,
        "decoder": decoder,
        "files": files,
    }
    if labels is not None:
        manifest["labels"] = "labels.txt"
    manifest.update(extra or {})
    (root / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return root


def yolo_package(
    root: Path,
    *,
    version: str = "1.0.0",
    name: str = "toy-yolo",
    size: int = 64,
    labels: tuple[str, ...] = ("person", "car", "dog"),
    boxes: list[tuple[float, float, float, float, int, float]] | None = None,
    dynamic_batch: bool = True,
    nan: bool = False,
    nan_above: float | None = None,
    symbolic_anchors: bool = False,
) -> Path:
    boxes = boxes if boxes is not None else [(32, 32, 16, 16, 0, 0.9), (33, 32, 16, 16, 0, 0.8), (10, 10, 8, 8, 1, 0.7)]
    const = yolo_const(len(labels), boxes)
    if nan:
        const[0, 0, 0] = np.nan
    root.mkdir(parents=True, exist_ok=True)
    constant_head_model(
        root / "model.onnx",
        const,
        size=size,
        dynamic_batch=dynamic_batch,
        nan_above=nan_above,
        symbolic_last_dim=symbolic_anchors,
    )
    batch = -1 if dynamic_batch else 1
    return write_package(
        root,
        name=name,
        version=version,
        task="detection",
        input_spec={
            "name": "images",
            "shape": [batch, 3, size, size],
            "dtype": "float32",
            "layout": "NCHW",
            "color": "RGB",
            "mean": [0, 0, 0],
            "std": [255, 255, 255],
            "resize": "letterbox",
            "pad_value": 114,
        },
        outputs=[{"name": "output0", "shape": [batch, 4 + len(labels), const.shape[2]]}],
        decoder={"type": "yolo", "score_threshold": 0.25, "iou_threshold": 0.45, "max_detections": 100},
        labels=list(labels),
    )


def classifier_package(
    root: Path,
    *,
    version: str = "1.0.0",
    name: str = "toy-cls",
    size: int = 32,
    logits: tuple[float, ...] = (0.1, 3.0, 1.0, -2.0),
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    const = np.array([logits], np.float32)
    constant_head_model(root / "model.onnx", const, size=size, input_name="input", output_name="logits")
    labels = [f"class{i}" for i in range(len(logits))]
    return write_package(
        root,
        name=name,
        version=version,
        task="classification",
        input_spec={
            "name": "input",
            "shape": [-1, 3, size, size],
            "dtype": "float32",
            "layout": "NCHW",
            "color": "RGB",
            "mean": [127, 127, 127],
            "std": [128, 128, 128],
            "resize": "stretch",
        },
        outputs=[{"name": "logits", "shape": [-1, len(logits)]}],
        decoder={"type": "classification", "top_k": 3, "softmax": True},
        labels=labels,
    )


def identity_package(
    root: Path,
    *,
    size: int = 32,
    resize: str = "letterbox",
    color: str = "RGB",
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0),
    std: tuple[float, float, float] = (1.0, 1.0, 1.0),
    pad_value: float = 0.0,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    identity_model(root / "model.onnx", size=size)
    return write_package(
        root,
        name="identity",
        version="1.0.0",
        task="raw",
        input_spec={
            "name": "images",
            "shape": [-1, 3, size, size],
            "dtype": "float32",
            "layout": "NCHW",
            "color": color,
            "mean": list(mean),
            "std": list(std),
            "resize": resize,
            "pad_value": pad_value,
        },
        outputs=[{"name": "out", "shape": [-1, 3, size, size]}],
        decoder={"type": "raw"},
    )


def _yolo_input(size: int) -> dict[str, Any]:
    return {
        "name": "images",
        "shape": [-1, 3, size, size],
        "color": "RGB",
        "mean": [0, 0, 0],
        "std": [255, 255, 255],
        "resize": "letterbox",
        "pad_value": 114,
    }


def yolo_seg_package(root: Path, *, anchors: int = 32) -> Path:
    """An Ultralytics-layout segmentation head on a 64x64 input with known masks: prototypes (2, 16, 16),
    the first +1 on the left half and -1 on the right, the second +1 everywhere. Anchor 0: class 0,
    score 0.9, box (8, 12)-(32, 52), coefficients (1, 0): its mask is the box's left half, columns 8..31,
    rows 12..51. Anchor 1: class 1, score 0.8, box (36, 24)-(52, 40), coefficients (0, 1): the whole box."""
    out = np.zeros((1, 4 + 2 + 2, anchors), np.float32)
    out[0, :, 0] = [20, 32, 24, 40, 0.9, 0, 1, 0]
    out[0, :, 1] = [44, 32, 16, 16, 0, 0.8, 0, 1]
    protos = np.ones((1, 2, 16, 16), np.float32)
    protos[0, 0, :, 8:] = -1
    root.mkdir(parents=True, exist_ok=True)
    constant_outputs_model(root / "model.onnx", {"output0": out, "output1": protos})
    return write_package(
        root,
        name="toy-seg",
        version="1.0.0",
        task="segmentation",
        input_spec=_yolo_input(64),
        outputs=[{"name": "output0", "shape": [-1, 8, anchors]}, {"name": "output1", "shape": [-1, 2, 16, 16]}],
        decoder={"type": "yolo-seg", "mask_format": "rle"},
        labels=["a", "b"],
    )


def yolo_pose_package(root: Path, *, anchors: int = 32) -> Path:
    """An Ultralytics-layout pose head (one class, 17 keypoints x (x, y, visibility)) on a 64x64 input:
    anchor 0 scores 0.9 with box (22, 22)-(42, 42) and keypoint k at (10 + 2k, 5 + k) visibility k / 16;
    anchor 1 scores 0.5 far away with every keypoint at (60, 60)."""
    out = np.zeros((1, 4 + 1 + 51, anchors), np.float32)
    out[0, :5, 0] = [32, 32, 20, 20, 0.9]
    out[0, :5, 1] = [6, 58, 8, 8, 0.5]
    for k in range(17):
        out[0, 5 + 3 * k : 8 + 3 * k, 0] = [10 + 2 * k, 5 + k, k / 16]
        out[0, 5 + 3 * k : 8 + 3 * k, 1] = [60, 60, 1]
    root.mkdir(parents=True, exist_ok=True)
    constant_outputs_model(root / "model.onnx", {"output0": out})
    return write_package(
        root,
        name="toy-pose",
        version="1.0.0",
        task="pose",
        input_spec=_yolo_input(64),
        outputs=[{"name": "output0", "shape": [-1, 56, anchors]}],
        decoder={"type": "yolo-pose"},
        labels=["person"],
    )
