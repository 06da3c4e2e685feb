#!/usr/bin/env bash
# The photos in Debian's opencv-doc examples/data (fruits, baboon, butterfly, messi5, ... ; the
# chessboard calibration shots left*/right* left out) unpacked into .cache/media/opencv-photos/: a
# held-out set for the INT8 classifier's check (tests/integration/test_real_models.py). Licence: the
# package's copyright file (Apache-2.0 AND BSD-3-Clause), copied beside them. Idempotent.
#
#   tools/models/build_opencv_photos.sh [OUT_DIR]
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
LOG_TAG=opencv-photos
OUT="${1:-$REPO_ROOT/.cache/media/opencv-photos}"
if [[ -f "$OUT/.copyright" ]] && ls "$OUT"/*.jpg >/dev/null 2>&1; then
    log "up to date: $OUT"
    exit 0
fi
setup_work
fetch_opencv_doc "$WORK/opencv-doc"
DOC="$WORK/opencv-doc/usr/share/doc/opencv-doc"
rm -rf "$OUT.tmp" && mkdir -p "$OUT.tmp"
for f in "$DOC"/examples/data/*.jpg "$DOC"/examples/data/*.png; do
    case "$(basename "$f")" in left*|right*) continue ;; esac
    cp "$f" "$OUT.tmp/"
done
cp "$DOC/copyright" "$OUT.tmp/.copyright"  # hidden: image folders pass over dotfiles silently
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
log "$(ls "$OUT" | grep -c -E '\.(jpg|png)$') photos in $OUT (opencv-doc $(opencv_doc_version "$WORK/opencv-doc"))"
