"""Preprocessing numerics and the built-in decoders against hand-computed answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgefleet.sdk import DecodeContext, Decoded, Decoder, DecoderError, ManifestError, load_package, register_decoder
from edgefleet.sdk._backends import InputBuffer
from edgefleet.sdk._decoders._nms import nms
from edgefleet.sdk._manifest import InputSpec
from edgefleet.sdk._model import load_model
from edgefleet.sdk._preprocess import CpuPreprocessor, compute_transform


def _spec(**kw: object) -> InputSpec:
    base: dict[str, object] = {
        "name": "x",
        "shape": (1, 3, 64, 64),
        "color": "RGB",
        "mean": (0, 0, 0),
        "std": (1, 1, 1),
        "resize": "letterbox",
        "pad_value": 0,
    }
    base.update(kw)
    return InputSpec.model_validate(base)


def test_letterbox_transform_centres_and_maps_back() -> None:
    t = compute_transform(320, 240, _spec())
    assert (t.scale_x, t.scale_y, t.pad_x, t.pad_y) == (0.2, 0.2, 0, 8)
    boxes = np.array([[24, 24, 40, 40]], np.float32)
    np.testing.assert_allclose(t.to_source(boxes), [[120, 80, 200, 160]])


def test_stretch_transform() -> None:
    t = compute_transform(320, 240, _spec(resize="stretch"))
    assert (t.pad_x, t.pad_y) == (0, 0)
    np.testing.assert_allclose(t.to_source(np.array([[0, 0, 64, 64]], np.float32)), [[0, 0, 320, 240]])


def test_cpu_preprocess_matches_a_plain_numpy_reference() -> None:
    import cv2

    spec = _spec(mean=(10, 20, 30), std=(2, 4, 8), pad_value=114)
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (48, 96, 3), dtype=np.uint8)
    buf = InputBuffer(np.zeros((1, 3, 64, 64), np.float32), 1)
    t = CpuPreprocessor(spec)(img, buf, 0)
    canvas = np.full((64, 64, 3), 114, np.uint8)
    resized = cv2.resize(img, (64, 32), interpolation=cv2.INTER_LINEAR)
    canvas[16:48] = resized
    ref = (canvas[:, :, ::-1].astype(np.float32) - [10, 20, 30]) / [2, 4, 8]
    np.testing.assert_allclose(buf.array[0], ref.transpose(2, 0, 1), rtol=1e-6)
    assert (t.pad_x, t.pad_y) == (0, 16)


def test_center_crop_fills_the_input_and_keeps_the_middle() -> None:
    """What Ultralytics (torchvision's Resize + CenterCrop) does to a classifier's input: the short side
    fills the input, the long side's ends are cut off; boxes map back through the negative pads."""
    import cv2

    spec = _spec(resize="center_crop")
    rng = np.random.default_rng(1)
    img = rng.integers(0, 255, (48, 96, 3), dtype=np.uint8)  # 2:1 -> resized 128x64, centre 64 kept
    t = compute_transform(96, 48, spec)
    assert (t.pad_x, t.pad_y, t.resized) == (-32, 0, (128, 64))
    buf = InputBuffer(np.zeros((1, 3, 64, 64), np.float32), 1)
    CpuPreprocessor(spec)(img, buf, 0)
    ref = cv2.resize(img, (128, 64), interpolation=cv2.INTER_LINEAR)[:, 32:96, ::-1]
    np.testing.assert_array_equal(buf.array[0], ref.transpose(2, 0, 1).astype(np.float32))
    # the input's left edge is source column 24, its right edge column 72
    np.testing.assert_allclose(t.to_source(np.array([[0, 0, 64, 64]], np.float32)), [[24, 0, 72, 48]])


def test_identity_model_sees_exactly_the_preprocessed_frame(toy_models: dict[str, Path]) -> None:
    model = load_model(load_package(toy_models["identity"]), max_batch=2)
    buf = model.acquire_buffer(1.0)
    assert buf is not None
    img = np.zeros((16, 32, 3), np.uint8)
    img[..., 2] = 200  # red in BGR
    model.preprocess(img, buf, 0)
    out = model.backend.infer(buf, 1)["out"]
    assert out.shape == (1, 3, 32, 32)
    assert out[0, 0, 16, 16] == 200 and out[0, 2, 16, 16] == 0  # RGB order: red first
    assert out[0, 0, 0, 0] == 0  # letterbox padding row
    model.close()


def test_nms_is_class_aware() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    classes = np.array([0, 0, 1])
    assert nms(boxes, scores, classes, 0.5, 10).tolist() == [0, 2]


def _ctx(pkg: Path, outputs: tuple[str, ...], **overrides: float) -> DecodeContext:
    p = load_package(pkg)
    return DecodeContext(p.manifest.decoder.params(), p.manifest, p.labels, outputs, dict(overrides))


def test_yolo_decoder_known_boxes(toy_models: dict[str, Path]) -> None:
    from edgefleet.sdk._decoders import build_decoder
    from tests.support.onnx_models import yolo_const

    dec = build_decoder(_ctx(toy_models["yolo"], ("output0",)))
    out = yolo_const(
        3,
        [(32, 32, 16, 16, 0, 0.9), (33, 32, 16, 16, 0, 0.8), (32, 32, 16, 16, 2, 0.6), (5, 5, 4, 4, 1, 0.1)],
    )
    t = compute_transform(64, 64, load_package(toy_models["yolo"]).manifest.input)
    (d,) = dec.decode({"output0": out}, [t])
    assert [(x.label, round(x.score, 2)) for x in d.detections] == [("person", 0.9), ("dog", 0.6)]
    assert d.detections[0].box == (24.0, 24.0, 40.0, 40.0)


def test_score_override_applies(toy_models: dict[str, Path]) -> None:
    from edgefleet.sdk._decoders import build_decoder
    from tests.support.onnx_models import yolo_const

    dec = build_decoder(_ctx(toy_models["yolo"], ("output0",), score_threshold=0.95))
    t = compute_transform(64, 64, load_package(toy_models["yolo"]).manifest.input)
    (d,) = dec.decode({"output0": yolo_const(3, [(32, 32, 16, 16, 0, 0.9)])}, [t])
    assert d.detections == ()


def test_labels_that_do_not_name_every_class_are_refused(nanodet: Path, toy_models: dict[str, Path]) -> None:
    """40 labels for NanoDet's 80-class head labelled class 56 as '56' without a word."""
    from edgefleet.sdk._decoders import build_decoder

    p = load_package(nanodet)
    names = tuple(o.name for o in p.manifest.outputs)
    params = p.manifest.decoder.params()
    with pytest.raises(DecoderError, match=r"40 labels, but output 'cls_8' scores 80 classes"):
        build_decoder(DecodeContext(params, p.manifest, p.labels[:40], names))
    with pytest.raises(DecoderError, match=r"reg_max 5 needs 4 x 6 = 24"):
        build_decoder(DecodeContext({**params, "reg_max": 5}, p.manifest, p.labels, names))
    with pytest.raises(DecoderError, match=r"outputs \['cls_32', 'reg_32'\] are read by no stride in \[8, 16\]"):
        build_decoder(DecodeContext({**params, "strides": [8, 16]}, p.manifest, p.labels, names))
    y = load_package(toy_models["yolo"])
    ynames = tuple(o.name for o in y.manifest.outputs)
    build_decoder(DecodeContext(y.manifest.decoder.params(), y.manifest, y.labels, ynames))  # as shipped
    with pytest.raises(DecoderError, match="labels, but output"):
        build_decoder(DecodeContext(y.manifest.decoder.params(), y.manifest, (*y.labels, "extra"), ynames))


_STRIDES = r"^nanodet-m:1\.0\.0: decoder \(nanodet\): strides: "


def test_nanodet_strides_that_do_not_fit_the_head_are_refused_at_load(nanodet: Path) -> None:
    """A strides list that does not match the model's head is one clear error naming the package when the
    decoder is built, not a ZeroDivisionError, a numpy error at the first frame, or lost detections."""
    from edgefleet.sdk._decoders import build_decoder

    p = load_package(nanodet)
    names = tuple(o.name for o in p.manifest.outputs)

    def build(manifest: Any = p.manifest, outputs: tuple[str, ...] = names, **params: Any) -> Decoder:
        return build_decoder(DecodeContext({**p.manifest.decoder.params(), **params}, manifest, p.labels, outputs))

    build()  # as shipped
    # a 4-level head (its stride-64 outputs not in the manifest) under 3 strides: stride 64 was never read
    with pytest.raises(
        DecoderError,
        match=r"^nanodet-m:1\.0\.0: outputs \['cls_64', 'reg_64'\] are read by no stride in \[8, 16, 32\] "
        r"\(the strides read 6 of the head's 8 outputs\)",
    ):
        build(outputs=(*names, "cls_64", "reg_64"))
    with pytest.raises(DecoderError, match=_STRIDES + r".*must be positive, got \[0, 1, 2\]"):
        # a head whose outputs are numbered by level, not by stride: a ZeroDivisionError before
        build(outputs=tuple(f"{kind}_{level}" for level in range(3) for kind in ("cls", "reg")), strides=[0, 1, 2])
    with pytest.raises(DecoderError, match=_STRIDES + r".*must differ, got \[8, 8, 16, 32\]"):
        build(strides=[8, 8, 16, 32])  # one level decoded twice
    with pytest.raises(DecoderError, match=_STRIDES + r".*at least 1 item"):
        build(strides=[])
    # each stride's cells over the input must be the head's: 416's outputs under a 320 input
    small = p.manifest.model_copy(update={"input": p.manifest.input.model_copy(update={"shape": (-1, 3, 320, 320)})})
    with pytest.raises(
        DecoderError,
        match=r"^nanodet-m:1\.0\.0: output 'cls_8' has 2704 cells, but stride 8 over the 320x320 input makes "
        r"40 x 40 = 1600",
    ):
        build(manifest=small)
    dynamic = p.manifest.model_copy(update={"input": p.manifest.input.model_copy(update={"shape": (-1, 3, -1, -1)})})
    with pytest.raises(DecoderError, match=r"^nanodet-m:1\.0\.0: nanodet needs a fixed input height and width"):
        build(manifest=dynamic)
    flat = p.manifest.model_copy(
        update={
            "outputs": tuple(
                o.model_copy(update={"shape": (-1, 216320)}) if o.name == "cls_8" else o for o in p.manifest.outputs
            )
        }
    )
    with pytest.raises(
        DecoderError, match=r"^nanodet-m:1\.0\.0: output 'cls_8' has shape \[-1, 216320\]; nanodet reads"
    ):
        build(manifest=flat)  # was "80 labels, but output 'cls_8' scores 216320 classes"


def test_a_manifest_with_too_few_strides_fails_to_load(nanodet: Path, tmp_path: Path) -> None:
    """The model has three head levels; a manifest that declares two (outputs and strides) loaded, and
    the largest objects, all found by stride 32, were never reported."""
    import shutil

    pkg = tmp_path / "nanodet-m"
    shutil.copytree(nanodet, pkg)
    manifest = pkg / "manifest.yaml"
    text = manifest.read_text()
    for line in ("  - {name: cls_32, shape: [-1, 169, 80]}\n", "  - {name: reg_32, shape: [-1, 169, 44]}\n"):
        assert line in text
        text = text.replace(line, "")
    manifest.write_text(text.replace("strides: [8, 16, 32]", "strides: [8, 16]"))
    with pytest.raises(
        DecoderError, match=r"^nanodet-m:1\.0\.0: outputs \['cls_32', 'reg_32'\] are read by no stride in \[8, 16\]"
    ):
        load_model(load_package(pkg), warmup=False)


def test_nanodet_decoder_on_a_hand_made_cell(nanodet: Path) -> None:
    from edgefleet.sdk._decoders import build_decoder

    p = load_package(nanodet)
    names = tuple(o.name for o in p.manifest.outputs)
    dec = build_decoder(DecodeContext(p.manifest.decoder.params(), p.manifest, p.labels, names))
    outs = {o.name: np.zeros((1, *o.shape[1:]), np.float32) for o in p.manifest.outputs}
    for o in p.manifest.outputs:
        if o.name.startswith("reg_"):
            outs[o.name][:] = -50.0
    # stride 16, cell (row 3, col 5): centre (88, 56); distances l,t,r,b = 2,3,4,5 bins x 16
    cell = 3 * 26 + 5
    outs["cls_16"][0, cell, 2] = 0.9  # car
    for side, k in enumerate((2, 3, 4, 5)):
        outs["reg_16"][0, cell, side * 11 + k] = 50.0
    t = compute_transform(416, 416, p.manifest.input)
    (d,) = dec.decode(outs, [t])
    assert len(d.detections) == 1
    det = d.detections[0]
    assert det.label == "car"
    np.testing.assert_allclose(det.box, (88 - 32, 56 - 48, 88 + 64, 56 + 80), atol=1e-3)


def test_classification_top_k(toy_models: dict[str, Path]) -> None:
    from edgefleet.sdk._decoders import build_decoder

    dec = build_decoder(_ctx(toy_models["cls"], ("logits",)))
    (d,) = dec.decode({"logits": np.array([[0.1, 3.0, 1.0, -2.0]], np.float32)}, [compute_transform(8, 8, _spec())])
    assert [c.label for c in d.classifications] == ["class1", "class2", "class0"]
    assert abs(sum(np.exp([0.1, 3.0, 1.0, -2.0]) / np.exp([0.1, 3.0, 1.0, -2.0]).sum()) - 1) < 1e-6
    assert d.classifications[0].score == pytest.approx(np.exp(3.0) / np.exp([0.1, 3.0, 1.0, -2.0]).sum(), rel=1e-5)


def _host_top_k(logits: np.ndarray, k: int) -> object:
    """What the GPU's top-k kernel returns, computed on the host."""
    from edgefleet.sdk._sparse import TopK

    flat = logits.reshape(logits.shape[0], -1).astype(np.float32)
    index = np.argsort(-flat, axis=1, kind="stable")[:, :k].astype(np.int32)
    m = flat.max(axis=1)
    lse = m + np.log(np.exp(flat - m[:, None]).sum(axis=1))
    lse[~np.isfinite(flat).all(axis=1)] = np.nan
    return TopK(np.take_along_axis(flat, index, axis=1), index, lse, flat.min(axis=1), logits.shape)


@pytest.mark.parametrize("softmax", [True, False])
def test_classification_decoder_gives_the_same_result_from_a_gpu_top_k(
    toy_models: dict[str, Path], softmax: bool
) -> None:
    """The decoder asks for its top k on the device; from those k values and each row's log-sum-exp it
    gives what it gives from the whole logits, and the dense view keeps shape, top k and non-finite rows."""
    from edgefleet.sdk._decoders import build_decoder
    from edgefleet.sdk._sparse import CandidateFilter

    ctx = _ctx(toy_models["cls"], ("logits",))
    dec = build_decoder(DecodeContext({"top_k": 3, "softmax": softmax}, ctx.manifest, ctx.labels, ("logits",)))
    assert dec.candidate_filters() == [CandidateFilter("logits", 0.0, "top_k", k=3)]
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 3, (6, 4)).astype(np.float32)
    if not softmax:
        logits = np.abs(logits) / np.abs(logits).sum(axis=1, keepdims=True)
    ts = [compute_transform(8, 8, _spec())] * 6
    want = dec.decode({"logits": logits}, ts)
    top = _host_top_k(logits, 3)
    got = dec.decode({"logits": top}, ts)  # type: ignore[dict-item]
    for g, w in zip(got, want, strict=True):
        assert [c.class_id for c in g.classifications] == [c.class_id for c in w.classifications]
        np.testing.assert_allclose(
            [c.score for c in g.classifications], [c.score for c in w.classifications], rtol=1e-5
        )
    dense = np.asarray(top)
    assert dense.shape == logits.shape
    np.testing.assert_array_equal(np.argsort(-dense, axis=1, kind="stable")[:, :3], top.index)  # type: ignore[attr-defined]
    logits[2, 1] = np.nan
    assert np.isnan(np.asarray(_host_top_k(logits, 3))[2]).all()
    assert np.isfinite(np.asarray(_host_top_k(logits, 3))[[0, 1, 3, 4, 5]]).all()


def test_unknown_decoder_is_a_clear_error(toy_models: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    import yaml

    dst = tmp_path / "p"
    shutil.copytree(toy_models["yolo"], dst)
    data = yaml.safe_load((dst / "manifest.yaml").read_text())
    data["decoder"] = {"type": "no-such-decoder"}
    (dst / "manifest.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(DecoderError, match="unknown decoder 'no-such-decoder'"):
        load_model(load_package(dst))


def test_bad_decoder_parameter_names_it(toy_models: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    import yaml

    dst = tmp_path / "p"
    shutil.copytree(toy_models["yolo"], dst)
    data = yaml.safe_load((dst / "manifest.yaml").read_text())
    data["decoder"]["scroe_threshold"] = 0.5
    (dst / "manifest.yaml").write_text(yaml.safe_dump(data))
    # refused when the manifest is read (so `models inspect` and a push refuse it too), not only at load
    with pytest.raises(ManifestError, match=r"manifest\.yaml: decoder \(yolo\): scroe_threshold: Extra inputs"):
        load_package(dst)


def test_app_registered_decoder_is_used(toy_models: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    import yaml

    from edgefleet.sdk import Pipeline

    class MaxDecoder(Decoder):
        def __init__(self, ctx: DecodeContext) -> None:
            self.ctx = ctx

        def decode(self, outputs, transforms):  # type: ignore[no-untyped-def]
            return [Decoded(raw={"max": np.asarray(outputs["output0"][i]).max()}) for i in range(len(transforms))]

    register_decoder("test-max", MaxDecoder, replace=True)
    dst = tmp_path / "p"
    shutil.copytree(toy_models["yolo"], dst)
    data = yaml.safe_load((dst / "manifest.yaml").read_text())
    data["decoder"] = {"type": "test-max"}
    (dst / "manifest.yaml").write_text(yaml.safe_dump(data))
    with Pipeline(dst, ["synthetic:?frames=3&fps=100&live=0"]) as p:
        results = list(p.results())
    assert len(results) == 3
    assert all(r.raw is not None and float(r.raw["max"]) == pytest.approx(33.0) for r in results)


def _yolo_reference(out: np.ndarray, threshold: float) -> list[list[tuple[int, float, tuple[float, ...]]]]:
    """The frame-at-a-time algorithm the batch decoder replaced: widen to float32, argmax per anchor."""
    from edgefleet.sdk._decoders._nms import nms as ref_nms

    out = np.asarray(out, np.float32).transpose(0, 2, 1)
    frames = []
    for pred in out:
        classes = pred[:, 4:].argmax(axis=1)
        scores = pred[np.arange(pred.shape[0]), 4 + classes]
        m = scores > threshold
        xywh = pred[m, :4]
        boxes = np.stack(
            [
                xywh[:, 0] - xywh[:, 2] / 2,
                xywh[:, 1] - xywh[:, 3] / 2,
                xywh[:, 0] + xywh[:, 2] / 2,
                xywh[:, 1] + xywh[:, 3] / 2,
            ],
            axis=1,
        )
        keep = ref_nms(boxes, scores[m], classes[m], 0.45, 100)
        frames.append([(int(classes[m][k]), float(scores[m][k]), tuple(boxes[k].tolist())) for k in keep])
    return frames


def _yolo_outputs(n: int, classes: int, anchors: int, seed: int) -> np.ndarray:
    """Random Ultralytics-layout outputs (N, 4 + C, A): boxes in a 64 px input, mostly low scores."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 4 + classes, anchors), np.float32)
    out[:, :2] = rng.uniform(0, 64, (n, 2, anchors))
    out[:, 2:4] = rng.uniform(2, 20, (n, 2, anchors))
    out[:, 4:] = rng.uniform(0, 1, (n, classes, anchors)) ** 6  # some above 0.25
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_yolo_batch_decoder_matches_the_per_frame_reference(toy_models: dict[str, Path], dtype: type) -> None:
    from edgefleet.sdk._decoders import build_decoder

    pkg = load_package(toy_models["yolo"])
    dec = build_decoder(_ctx(toy_models["yolo"], ("output0",)))
    n = 6
    out = _yolo_outputs(n, len(pkg.labels), 300, 7)
    out[2, 4:] = 0.0  # a frame with no candidate at all
    out[4, 4:, :5] = 0.5  # ties between classes: the first class wins, as argmax does
    out = out.astype(dtype)
    t = compute_transform(64, 64, pkg.manifest.input)
    got = dec.decode({"output0": out}, [t] * n)
    ref = _yolo_reference(out, dec.p.score_threshold)
    assert sum(len(r) for r in ref) > 20
    assert ref[2] == [] and got[2].detections == ()
    for d, r in zip(got, ref, strict=True):
        assert [x.class_id for x in d.detections] == [c for c, _, _ in r]
        np.testing.assert_allclose([x.score for x in d.detections], [s for _, s, _ in r], rtol=1e-6)
        want = [t.to_source(np.array([b], np.float32))[0] for _, _, b in r]
        np.testing.assert_allclose(
            np.reshape([x.box for x in d.detections], (-1, 4)), np.reshape(want, (-1, 4)), atol=1e-4
        )


def _nanodet_outputs(p: object, n: int, seed: int) -> dict[str, np.ndarray]:
    """Random NanoDet outputs for ``n`` frames: mostly low class scores (some pass 0.35), box logits."""
    rng = np.random.default_rng(seed)
    outs = {}
    for o in p.manifest.outputs:  # type: ignore[attr-defined]
        shape = (n, *o.shape[1:])
        if o.name.startswith("cls_"):
            outs[o.name] = (rng.uniform(0, 1, shape) ** 12).astype(np.float32)
        else:
            outs[o.name] = rng.normal(0, 2, shape).astype(np.float32)
    return outs


def test_nanodet_batch_decoder_matches_frame_by_frame(nanodet: Path) -> None:
    """Decoding a batch gives each frame exactly what decoding it alone gives."""
    from edgefleet.sdk._decoders import build_decoder

    p = load_package(nanodet)
    names = tuple(o.name for o in p.manifest.outputs)
    dec = build_decoder(DecodeContext(p.manifest.decoder.params(), p.manifest, p.labels, names))
    n = 4
    outs = _nanodet_outputs(p, n, 3)
    outs["cls_8"][1] = 0.0
    outs["cls_16"][1] = 0.0
    outs["cls_32"][1] = 0.0  # frame 1: nothing
    ts = [compute_transform(416 + 32 * i, 416, p.manifest.input) for i in range(n)]
    batch = dec.decode(outs, ts)
    assert batch[1].detections == ()
    assert sum(len(d.detections) for d in batch) > 10
    for i in range(n):
        (alone,) = dec.decode({k: v[i : i + 1] for k, v in outs.items()}, [ts[i]])
        assert alone == batch[i]


@pytest.mark.parametrize("classes", [80, 7, 16])
def test_any_class_above_threshold_matches_the_max_reduction(classes: int) -> None:
    from edgefleet.sdk._decoders._detection import _any_above

    rng = np.random.default_rng(classes)
    scores = (rng.uniform(0, 1, (3, 500, classes)) ** 10).astype(np.float32)
    for s in (scores, scores[:, ::2]):  # contiguous, and a strided view
        np.testing.assert_array_equal(_any_above(s, 0.3), s.max(axis=2) > 0.3)


def _candidates(dense: np.ndarray, axis: int, threshold: float, pad: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """What the GPU filter hands back, built on the host: the anchors with a score >= threshold in anchor
    order, padded with ``pad`` zero anchors (index -1) past the busiest frame's count."""
    scores = dense[:, 4:, :] if axis == 2 else dense
    best = scores.max(axis=1 if axis == 2 else 2)
    kept = [np.nonzero(b >= threshold)[0] for b in best]
    m = max(len(k) for k in kept) + pad
    index = np.full((dense.shape[0], m), -1, np.int32)
    shape = (dense.shape[0], dense.shape[1], m) if axis == 2 else (dense.shape[0], m, dense.shape[2])
    data = np.zeros(shape, dense.dtype)
    for i, k in enumerate(kept):
        index[i, : len(k)] = k
        if axis == 2:
            data[i, :, : len(k)] = dense[i][:, k]
        else:
            data[i, : len(k)] = dense[i][k]
    return data, index


def test_candidate_rows_densify_to_the_declared_shape() -> None:
    from edgefleet.sdk._sparse import CandidateRows

    rng = np.random.default_rng(5)
    dense = (rng.uniform(0, 1, (3, 50, 6)) ** 4).astype(np.float32)
    data, index = _candidates(dense, 1, 0.5)
    rows = CandidateRows(data, index, dense.shape, axis=1)  # type: ignore[arg-type]
    want = np.where((dense.max(axis=2) >= 0.5)[:, :, None], dense, 0)
    np.testing.assert_array_equal(np.asarray(rows), want)
    np.testing.assert_array_equal(rows[2], want[2])
    assert rows.counts().tolist() == [int((b >= 0.5).sum()) for b in dense.max(axis=2)]
    with pytest.raises(ValueError):
        CandidateRows(data, index[:, :2], dense.shape, axis=1)  # type: ignore[arg-type]


def test_box_candidates_densify_per_output_and_refuse_inconsistent_records() -> None:
    """Each stride's BoxCandidates densifies only its own cells (the records are shared); a frame marked
    non-finite is NaN in every dense view, the consumed distributions too; mismatched arrays are refused."""
    from edgefleet.sdk._sparse import BoxCandidates, ConsumedOutput

    frame = np.array([0, 0, 1, 1])
    cell = np.array([2, 7, 3, 12])  # cells 0..9 belong to the first output, 10..14 to the second
    cls = np.array([1, 0, 2, 1])
    score = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
    box = np.arange(16, dtype=np.float32).reshape(4, 4)
    bad = np.array([False, False, True])
    first = BoxCandidates(frame, cell, cls, score, box, bad, (3, 10, 3), 0)
    second = BoxCandidates(frame, cell, cls, score, box, bad, (3, 5, 3), 10)
    a, b = np.asarray(first), np.asarray(second)
    assert a.shape == (3, 10, 3) and b.shape == (3, 5, 3)
    assert a[0, 2, 1] == np.float32(0.9) and a[0, 7, 0] == np.float32(0.8) and a[1, 3, 2] == np.float32(0.7)
    assert b[1, 2, 1] == np.float32(0.6) and np.count_nonzero(b[:2]) == 1 and np.count_nonzero(a[:2]) == 3
    assert np.isnan(a[2]).all() and np.isnan(b[2]).all() and not first.final
    consumed = np.asarray(ConsumedOutput((3, 5, 32), np.float16, bad))
    assert consumed.dtype == np.float16 and np.isnan(consumed[2]).all() and not consumed[:2].any()
    with pytest.raises(ValueError):
        BoxCandidates(frame, cell[:3], cls, score, box, bad, (3, 10, 3), 0)
    with pytest.raises(ValueError):
        BoxCandidates(frame, cell, cls, score, box, bad[:2], (3, 10, 3), 0)


def test_all_finite_answers_from_the_sparse_forms_without_densifying(monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap's health checks ask every output of every batch in the window whether it is finite; the
    GPU filters' forms answer from what they carry (densifying is refused here to prove it) and agree
    with their dense views."""
    from edgefleet.sdk._sparse import BoxCandidates, CandidateRows, ConsumedOutput, TopK, all_finite

    dense = np.ones((2, 5, 3), np.float32)
    data, index = _candidates(dense, 1, 0.5)
    rows = CandidateRows(data, index, dense.shape, axis=1)  # type: ignore[arg-type]
    bad_rows = CandidateRows(np.where(data > 0, np.nan, data), index, dense.shape, axis=1)  # type: ignore[arg-type]
    top = TopK(np.ones((2, 1), np.float32), np.zeros((2, 1), np.int32), np.array([1.0, np.nan], np.float32),
               np.zeros(2, np.float32), (2, 4))  # fmt: skip
    z = np.zeros(0, np.int64)
    boxes = BoxCandidates(z, z, z, z.astype(np.float32), np.zeros((0, 4), np.float32), np.array([False, True]),
                          (2, 5, 3), 0)  # fmt: skip
    consumed = ConsumedOutput((2, 5, 32), np.float32, np.array([False, False]))
    want = {id(x): bool(np.isfinite(np.asarray(x)).all()) for x in (rows, bad_rows, top, boxes, consumed)}
    for cls in (CandidateRows, TopK, BoxCandidates, ConsumedOutput):
        monkeypatch.setattr(cls, "__array__", lambda *a, **k: pytest.fail("densified"))
    got = {id(x): all_finite(x) for x in (rows, bad_rows, top, boxes, consumed)}
    assert got == want and list(got.values()) == [True, False, False, False, True]
    assert all_finite(np.arange(3)) and not all_finite(np.array([0.0, np.inf]))


def _nanodet_case(
    nanodet: Path, multi_label: bool, **extra: Any
) -> tuple[Any, dict[str, np.ndarray], list[Any], list[Any]]:
    """NanoDet's decoder, 4 frames of model outputs (frame 2 with no candidate), their transforms and
    the detections decoded from the full tensors."""
    from edgefleet.sdk._decoders import build_decoder

    p = load_package(nanodet)
    names = tuple(o.name for o in p.manifest.outputs)
    params = {**p.manifest.decoder.params(), "multi_label": multi_label, **extra}
    dec = build_decoder(DecodeContext(params, p.manifest, p.labels, names))
    outs = _nanodet_outputs(p, 4, 11)
    for level in ("cls_8", "cls_16", "cls_32"):
        outs[level][2] = 0.0
    ts = [compute_transform(416 + 32 * i, 416, p.manifest.input) for i in range(4)]
    return dec, outs, ts, dec.decode(outs, ts)


@pytest.mark.parametrize("multi_label", [True, False])
def test_nanodet_decoder_gives_the_same_detections_from_gpu_decoded_boxes(nanodet: Path, multi_label: bool) -> None:
    """The GFL head decoded on the GPU (records of cell, class, score and box; here built on the host by
    the kernels' reference) gives the full tensors' detections: same classes and scores, boxes equal to
    float32 rounding. The records' dense views keep the declared shapes, and NaN marks a bad frame."""
    from edgefleet.sdk._sparse import BoxCandidates, ConsumedOutput
    from tests.support.gfl_reference import gfl_nms_reference, gfl_records

    dec, outs, ts, want = _nanodet_case(nanodet, multi_label)
    gpu = gfl_records(outs, dec.candidate_filters())
    assert isinstance(gpu["cls_16"], BoxCandidates) and isinstance(gpu["reg_16"], ConsumedOutput)
    got = dec.decode(gpu, ts)  # type: ignore[arg-type]
    assert sum(len(d.detections) for d in want) > 10
    for g, w in zip(got, want, strict=True):
        assert [(d.class_id, d.label, d.score) for d in g.detections] == [
            (d.class_id, d.label, d.score) for d in w.detections
        ]
        for a, b in zip(g.detections, w.detections, strict=True):
            np.testing.assert_allclose(a.box, b.box, atol=1e-3)
    final = {**gpu}
    for f in dec.candidate_filters():  # what the device NMS hands over: each frame's detections
        final[f.output] = gfl_nms_reference(gpu[f.output], f)  # type: ignore[arg-type]
    assert dec.decode(final, ts) == got  # type: ignore[arg-type]
    assert final["cls_8"].final and final["cls_8"].frame.size == sum(len(d.detections) for d in got)  # type: ignore[attr-defined]
    dense = np.asarray(gpu["cls_16"])
    assert dense.shape == outs["cls_16"].shape and np.asarray(gpu["reg_16"]).shape == outs["reg_16"].shape
    kept = dense > 0
    assert kept.any() and np.array_equal(dense[kept], outs["cls_16"][kept])
    outs["cls_32"][1, 5, 3] = np.nan
    bad = gfl_records(outs, dec.candidate_filters())
    assert np.isnan(np.asarray(bad["cls_8"])[1]).all() and np.isfinite(np.asarray(bad["cls_8"])[[0, 2, 3]]).all()
    assert np.isnan(np.asarray(bad["reg_8"])[1]).all()


@pytest.mark.parametrize(
    "extra",
    [{"classes": ["person", "car", "chair"]}, {"pre_nms_top_k": 3, "max_detections": 2}, {"iou_threshold": 0.05}],
)
def test_device_nms_reference_finishes_frames_like_the_host(nanodet: Path, extra: dict[str, Any]) -> None:
    """The device NMS's contract (its host reference): class filter, pre-NMS top k, greedy NMS and the
    per-frame limit give exactly what the host finish gives on the same records."""
    from tests.support.gfl_reference import gfl_nms_reference, gfl_records

    dec, outs, ts, want = _nanodet_case(nanodet, True, **extra)
    records = gfl_records(outs, dec.candidate_filters())
    final = {**records}
    for f in dec.candidate_filters():
        final[f.output] = gfl_nms_reference(records[f.output], f)  # type: ignore[arg-type]
    host = dec.decode(records, ts)  # type: ignore[arg-type]
    assert dec.decode(final, ts) == host  # type: ignore[arg-type]
    assert [len(d.detections) for d in host] == [len(d.detections) for d in want]
    assert sum(len(d.detections) for d in host) > 0


def test_yolo_decoder_gives_the_same_detections_from_gpu_candidates(toy_models: dict[str, Path]) -> None:
    from edgefleet.sdk._decoders import build_decoder
    from edgefleet.sdk._sparse import CandidateRows

    pkg = load_package(toy_models["yolo"])
    dec = build_decoder(_ctx(toy_models["yolo"], ("output0",)))
    n = 5
    out = _yolo_outputs(n, len(pkg.labels), 400, 8)
    out[3, 4:] = 0.0
    t = compute_transform(64, 64, pkg.manifest.input)
    want = dec.decode({"output0": out}, [t] * n)
    data, index = _candidates(out, 2, dec.p.score_threshold)
    got = dec.decode({"output0": CandidateRows(data, index, out.shape, axis=2)}, [t] * n)  # type: ignore[dict-item]
    assert sum(len(d.detections) for d in want) > 10
    assert got == want


def _crowd(rng: np.random.Generator, n: int, classes: int, ties: bool) -> tuple[np.ndarray, ...]:
    centre = rng.uniform(0, 320, (n, 2))
    size = rng.uniform(4, 60, (n, 2))
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, n).astype(np.float32)
    if ties:
        scores = np.round(scores * 8) / 8  # many equal scores: order must follow the stable sort
    return boxes, scores, rng.integers(0, classes, n)


@pytest.mark.parametrize("path", ["pairs", "blocks"])
@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 200, 1000])
def test_nms_keeps_exactly_what_the_simple_loop_keeps(n: int, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgefleet.sdk._decoders import _nms
    from edgefleet.sdk._decoders._nms import nms_simple

    if path == "blocks":
        monkeypatch.setattr(_nms, "_PAIRS_UP_TO", 0)  # what a crowded batch gets
    rng = np.random.default_rng(n)
    for trial in range(12):
        boxes, scores, classes = _crowd(rng, n, 1 + trial % 4 * 20, ties=trial % 2 == 0)
        if n and trial == 5:
            boxes[n // 2] = np.nan  # a broken box: suppressed by whatever it meets, in both
        for iou, limit in ((0.45, 100), (0.0, 1000), (0.7, 7), (1.0, 5000)):
            want = nms_simple(boxes, scores, classes, iou, limit)
            got = nms(boxes, scores, classes, iou, limit)
            assert got.tolist() == want.tolist(), (trial, iou, limit)


@pytest.mark.parametrize("path", ["pairs", "blocks"])
def test_whole_batch_detection_finish_equals_frame_by_frame(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoders finish a batch's candidates in one pass (class filter, each frame's pre-NMS top k,
    NMS per frame and class, each frame's max_detections, source pixels); that gives, frame by frame,
    exactly what the textbook loop over each frame alone gives."""
    from edgefleet.sdk._decoders import _nms
    from edgefleet.sdk._decoders._detection import _DetectionParams, _per_frame
    from edgefleet.sdk._decoders._nms import nms_simple
    from edgefleet.sdk._results import Detection

    if path == "blocks":
        monkeypatch.setattr(_nms, "_PAIRS_UP_TO", 0)
    rng = np.random.default_rng(11)
    labels = tuple(f"c{i}" for i in range(6))
    ctx = DecodeContext({}, None, labels, ("x",))  # type: ignore[arg-type]
    n = 7
    transforms = [compute_transform(320 + 64 * i, 240 + 32 * i, _spec()) for i in range(n)]
    counts = [0, 40, 3, 150, 1, 90, 60]
    frame = np.repeat(np.arange(n), counts)
    boxes, scores, classes = _crowd(rng, frame.size, len(labels), ties=True)
    keep_mask = np.array([True, True, False, True, True, True])
    for pre_top, max_det, keep in ((1000, 100, None), (50, 10, None), (1000, 5, keep_mask)):
        p = _DetectionParams(type="test", iou_threshold=0.45, pre_nms_top_k=pre_top, max_detections=max_det)
        got = _per_frame(ctx, p, keep, frame, boxes, scores, classes, transforms)
        for i, t in enumerate(transforms):
            m = frame == i
            if keep is not None:
                m &= keep[classes]
            b, sc, c = boxes[m], scores[m], classes[m]
            top = np.argsort(-sc, kind="stable")[:pre_top]
            b, sc, c = b[top], sc[top], c[top]
            kept = nms_simple(b, sc, c, 0.45, max_det)
            src = t.to_source(b[kept])
            want = tuple(
                Detection(tuple(float(v) for v in bx), float(s), int(k), labels[int(k)])  # type: ignore[arg-type]
                for bx, s, k in zip(src, sc[kept], c[kept], strict=True)
            )
            assert got[i].detections == want, (pre_top, max_det, i)
        assert sum(len(d.detections) for d in got) > 20


def test_detectors_declare_their_gpu_filters_and_a_cpu_backend_declines_them(
    nanodet: Path, toy_models: dict[str, Path]
) -> None:
    """The decoder says which outputs may be thresholded on the device (with its own threshold); a
    backend without a GPU filter (here ONNX Runtime on the CPU) declines and keeps the full tensors."""
    from edgefleet.sdk._decoders import build_decoder
    from edgefleet.sdk._sparse import CandidateFilter

    p = load_package(nanodet)
    names = tuple(o.name for o in p.manifest.outputs)
    nano = build_decoder(DecodeContext(p.manifest.decoder.params(), p.manifest, p.labels, names))
    t, cp, rp = nano.p.score_threshold, nano.p.cls_prefix, nano.p.reg_prefix
    grids = [(-(-416 // s), -(-416 // s)) for s in nano.p.strides]  # the demo model's input is 416 x 416
    firsts = [0, grids[0][0] * grids[0][1], grids[0][0] * grids[0][1] + grids[1][0] * grids[1][1]]
    want = [
        CandidateFilter(
            f"{cp}{s}",
            t,
            "gfl",
            companion=f"{rp}{s}",
            capacity=4096,
            stride=s,
            grid_width=g[1],
            first=first,
            bins=nano.p.reg_max + 1,
            multi_label=True,
            levels=3,
            nms_iou=nano.p.iou_threshold,
            pre_nms_top_k=nano.p.pre_nms_top_k,
            max_detections=nano.p.max_detections,
        )
        for s, g, first in zip(nano.p.strides, grids, firsts, strict=True)
    ]
    assert nano.candidate_filters() == want and {w.output for w in want} <= set(names)
    yolo_pkg = load_package(toy_models["yolo"])
    yolo = build_decoder(_ctx(toy_models["yolo"], ("output0",)))
    (f,) = yolo.candidate_filters()
    assert (f.output, f.layout, f.classes, f.threshold) == (
        "output0",
        "channels_first",
        len(yolo_pkg.labels),
        yolo.p.score_threshold,
    )
    model = load_model(yolo_pkg, max_batch=2)
    try:
        assert not model.backend.filter_candidates(f)
        buf = model.acquire_buffer(1.0)
        assert buf is not None and type(model.backend.infer(buf, 1)["output0"]) is np.ndarray
    finally:
        model.close()


@pytest.mark.parametrize("gpu_filters", [True, False])
def test_load_model_offers_the_decoders_filters_unless_told_not_to(
    toy_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch, gpu_filters: bool
) -> None:
    """keep_raw needs the exact tensors: load_model(gpu_filters=False) (what a keep_raw pipeline passes)
    never offers the decoder's filters to the backend; by default every one of them is offered."""
    from edgefleet.sdk._backends._onnxruntime import OnnxRuntimeBackend

    offered: list[object] = []
    monkeypatch.setattr(OnnxRuntimeBackend, "filter_candidates", lambda self, f: offered.append(f) or False)
    model = load_model(load_package(toy_models["cls"]), warmup=False, gpu_filters=gpu_filters)
    try:
        want = model.decoder.candidate_filters()
        assert len(want) == 1 and want[0].layout == "top_k"
        assert offered == (want if gpu_filters else [])
    finally:
        model.close()


def test_a_keep_raw_pipeline_loads_its_model_without_gpu_filters(
    toy_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgefleet.sdk import Pipeline
    from edgefleet.sdk._backends._onnxruntime import OnnxRuntimeBackend

    offered: list[object] = []
    monkeypatch.setattr(OnnxRuntimeBackend, "filter_candidates", lambda self, f: offered.append(f) or False)
    for keep_raw in (True, False):
        offered.clear()
        with Pipeline(toy_models["cls"], ["synthetic:?live=0"], max_frames=2, keep_raw=keep_raw) as p:
            results = list(p.results())
        assert len(results) == 2 and (results[0].raw is not None) == keep_raw
        assert bool(offered) == (not keep_raw)
