#!/usr/bin/env bash
# Build plain Ultralytics ONNX exports into the git-ignored cache (on demand, not committed):
#
#   tools/models/build_ultralytics.sh [--force] [OUT_DIR]    (default OUT_DIR: .cache/models/ultralytics)
#
#   OUT_DIR/yolov8n.onnx             detect   (1, 84, 8400)              from yolov8n.yaml, imgsz 640
#   OUT_DIR/yolov8n-seg.onnx         segment  (1, 116, 8400) + (1, 32, 160, 160) protos
#   OUT_DIR/yolov8n-pose.onnx        pose     (1, 56, 8400): 17 keypoints x (x, y, visibility)
#   OUT_DIR/yolov8n-cls.onnx         classify (1, 1000), softmax applied, imgsz 224
#   OUT_DIR/yolov8n-dynamic.onnx     detect at imgsz 320 with dynamic=True: (batch, 84, anchors),
#                                    2100 anchors at run time (the graph declares them symbolic)
#   OUT_DIR/yolov8n-{seg,pose}-dynamic.onnx  segment and pose at 640 with dynamic=True (any batch:
#                                    tools/bench/yolo_decode_bench.py decodes batches of 32)
#
# Each is what `yolo export format=onnx` writes, unchanged (metadata_props included). The models are
# built from Ultralytics' architecture YAMLs with random weights (torch.manual_seed(0)) whose BatchNorm
# statistics are measured on 16 frames of models/media/vtest-300.mp4 (so scores and boxes vary with the
# input): no weights are downloaded, so they are good for layouts, decoders and throughput, never for
# accuracy claims.
# The venv (torch 2.13.0 CPU wheel + ultralytics, about 1.6 GB) is kept in .cache/venvs/ultralytics
# so a --force rebuild takes seconds; delete it to reclaim the space.
# Does nothing when OUT_DIR/BUILD records this script's pins and every file is there, unless --force.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
LOG_TAG=ultralytics

# torch 2.13.0 / torchvision 0.28.0 in the same pip command as ultralytics: 2.13.0 is the CPU wheel this
# kind of machine keeps on disk; any other torch makes pip fetch a multi-GB CUDA build.
# onnxslim and onnxruntime are what Ultralytics' ONNX export checks for; pinned here so it never tries
# to install them itself.
VENV_REQS=(torch==2.13.0 torchvision==0.28.0 ultralytics==8.4.190 onnx==1.23.2 onnxslim==0.1.98
           onnxruntime==1.32.0 "numpy<3")
MODELS=(yolov8n yolov8n-seg yolov8n-pose yolov8n-cls yolov8n-dynamic yolov8n-seg-dynamic yolov8n-pose-dynamic)

FORCE=0
OUT=""
for a in "$@"; do
    case "$a" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) OUT="$a" ;;
    esac
done
OUT="${OUT:-$CACHE_MODELS_DIR/ultralytics}"
STAMP="${VENV_REQS[*]} bn-measured"

up_to_date() {
    [[ -f "$OUT/BUILD" && "$(head -1 "$OUT/BUILD")" == "$STAMP" ]] || return 1
    local m
    for m in "${MODELS[@]}"; do [[ -s "$OUT/$m.onnx" ]] || return 1; done
}

if [[ $FORCE -eq 0 ]] && up_to_date; then
    log "up to date: $OUT (use --force to rebuild)"
    exit 0
fi

t0=$SECONDS
setup_work
VENV="$REPO_ROOT/.cache/venvs/ultralytics"
mkdir -p "$(dirname "$VENV")"
make_venv "$VENV" "${VENV_REQS[@]}"
VPY="$VENV/bin/python"
"$VPY" -c 'import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith("2.13.0") else "torch " + v + " is not 2.13.0")'
log "venv ready after $((SECONDS - t0)) s"

CLIP="$REPO_ROOT/models/media/vtest-300.mp4"  # BatchNorm statistics are measured on its frames
[[ -f "$CLIP" ]] || die "$CLIP missing (tools/models/build.sh clip)"
STAGE="$WORK/stage-ultralytics"
rm -rf "$STAGE" && mkdir -p "$STAGE"
# Offline: no settings sync, no online checks; Ultralytics' settings file lives in the work folder.
if ! YOLO_OFFLINE=1 YOLO_CONFIG_DIR="$WORK/ultralytics-config" \
        "$VPY" "$MODELS_TOOLS_DIR/_ultralytics_export.py" "$CLIP" "$STAGE" "${MODELS[@]}" > "$WORK/export.log" 2>&1; then
    tail -30 "$WORK/export.log" >&2
    die "export failed (log above)"
fi
grep -E "^yolov8n" "$WORK/export.log" >&2
{
    printf '%s\n' "$STAMP"
    printf 'built by tools/models/build_ultralytics.sh from Ultralytics architecture YAMLs, random weights (seed 0), BatchNorm statistics of vtest-300.mp4\n'
    (cd "$STAGE" && sha256sum ./*.onnx)
} > "$STAGE/BUILD"
rm -rf "$OUT" && mkdir -p "$(dirname "$OUT")" && mv "$STAGE" "$OUT"
log "done in $((SECONDS - t0)) s: $OUT"
