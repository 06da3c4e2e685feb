#!/usr/bin/env bash
# Build the committed test clip models/media/vtest-300.mp4 from Debian's opencv-doc package.
#
#   tools/models/build_clip.sh [--force]            the committed clip (+ models/media/README.md)
#   tools/models/build_clip.sh --1080p30 [OUT]      also/only: a 1920x1080, 30 fps, ~20 s H.264
#                                                   benchmark clip, default
#                                                   .cache/media/vtest-1080p30.mp4 (not committed)
#
# Source: `apt-get download opencv-doc` + `dpkg -x`, file
# /usr/share/doc/opencv-doc/examples/data/vtest.avi (795 frames, 768x576, 10 fps, MPEG-4 MP43).
# The committed clip keeps frames 0..299 (30 s at 10 fps), re-encoded with Debian's ffmpeg to
# H.264 (libx264, High profile, yuv420p, CRF 23, GOP 30 with no scene-cut keyframes,
# faststart, no audio, bit-exact muxing flags).  It is skipped if it already exists with the
# expected sha256 (or, for a different ffmpeg build, with 300 frames); --force re-encodes.
# Needs: apt-get/dpkg (Debian), ffmpeg (installed with apt-get if missing).
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
LOG_TAG=clip

MEDIA="$REPO_ROOT/models/media"
CLIP="$MEDIA/vtest-300.mp4"
CRF=23
FRAMES=300
# sha256 of the clip as built with Debian bookworm's ffmpeg 5.1.x (libx264 164); another
# ffmpeg/x264 build gives a different (equally valid) file.
EXPECTED_SHA="5ecc96b060e558bb229ae2ccecddd4aa42a281fc1904ecf4a436c67803484457"

FORCE=0
HD=0
HD_OUT=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --force) FORCE=1 ;;
        --1080p30)
            HD=1
            if [[ $# -gt 1 && "$2" != --* ]]; then HD_OUT="$2"; shift; fi ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) die "unknown argument $1" ;;
    esac
    shift
done
HD_OUT="${HD_OUT:-$REPO_ROOT/.cache/media/vtest-1080p30.mp4}"

frame_count() {
    ffprobe -v error -select_streams v:0 -count_packets -show_entries stream=nb_read_packets \
        -of csv=p=0 "$1" 2>/dev/null || echo 0
}

clip_ok() {
    [[ -f "$CLIP" ]] || return 1
    local sha
    sha="$(sha256sum "$CLIP" | cut -d' ' -f1)"
    [[ "$sha" == "$EXPECTED_SHA" ]] && return 0
    command -v ffprobe >/dev/null 2>&1 && [[ "$(frame_count "$CLIP")" == "$FRAMES" ]]
}

t0=$SECONDS
need_clip=1
if [[ $FORCE -eq 0 ]] && clip_ok; then
    log "up to date: $CLIP"
    need_clip=0
fi
if [[ $need_clip -eq 0 && $HD -eq 0 ]]; then
    exit 0
fi

need_cmd ffmpeg ffmpeg
need_cmd ffprobe ffmpeg

if [[ $need_clip -eq 1 ]]; then
    setup_work
    fetch_opencv_doc "$WORK/opencv-doc"
    DOC="$WORK/opencv-doc/usr/share/doc/opencv-doc"
    SRC="$DOC/examples/data/vtest.avi"
    OCV_VER="$(opencv_doc_version "$WORK/opencv-doc")"
    mkdir -p "$MEDIA"
    log "encoding frames 0..$((FRAMES - 1)) of vtest.avi -> $CLIP (libx264 CRF $CRF)"
    ffmpeg -nostdin -y -loglevel error -i "$SRC" -map 0:v:0 -frames:v "$FRAMES" -an \
        -c:v libx264 -preset slow -crf "$CRF" -profile:v high -pix_fmt yuv420p \
        -g 30 -keyint_min 30 -sc_threshold 0 -movflags +faststart \
        -map_metadata -1 -fflags +bitexact -flags:v +bitexact "$CLIP.tmp.mp4"
    n="$(frame_count "$CLIP.tmp.mp4")"
    [[ "$n" == "$FRAMES" ]] || die "encoded clip has $n frames, expected $FRAMES"
    mv "$CLIP.tmp.mp4" "$CLIP"
    sha="$(sha256sum "$CLIP" | cut -d' ' -f1)"
    size="$(stat -c %s "$CLIP")"
    ffv="$(ffmpeg -version | head -1 | awk '{print $3}')"
    # the licence paragraph of Debian's copyright file that covers samples/data
    cat > "$MEDIA/README.md" <<EOF
# Test media

## vtest-300.mp4

| | |
|---|---|
| file | \`vtest-300.mp4\` ($size bytes, sha256 \`$sha\`) |
| content | frames 0-299 of OpenCV's sample video \`vtest.avi\` (pedestrians on a campus walkway, a parked van and car), 300 frames, 768x576, 10 fps, 30 s |
| video | H.264 (libx264, High profile, yuv420p, CRF $CRF, preset slow, GOP 30 with no scene-cut keyframes), MP4 with faststart, no audio |
| source | Debian package \`opencv-doc\` $OCV_VER, file \`/usr/share/doc/opencv-doc/examples/data/vtest.avi\` (795 frames, 768x576, 10 fps, MPEG-4 MP43) |
| licence | OpenCV sample data: Apache-2.0 AND BSD-3-Clause, per Debian's \`/usr/share/doc/opencv-doc/copyright\` (the \`Files: *\` paragraph: "License: Apache-2.0 AND BSD-3-Clause", "upstream relicensed the whole project to Apache-2.0, but a large portion of the source tree remains to be licensed under BSD-3-Clause"); the licence texts are in Debian's \`/usr/share/common-licenses/Apache-2.0\` and in that copyright file (BSD-3-Clause) |
| built by | \`tools/models/build_clip.sh\` (apt-get download opencv-doc, dpkg -x, ffmpeg $ffv) |

Frame 200 (0-based, reading sequentially) is the frame of the NanoDet golden test
(\`tests/reference/golden_nanodet_frame200.json\`).

Re-encode command (from \`build_clip.sh\`):

\`\`\`
ffmpeg -i vtest.avi -map 0:v:0 -frames:v 300 -an -c:v libx264 -preset slow -crf $CRF \\
  -profile:v high -pix_fmt yuv420p -g 30 -keyint_min 30 -sc_threshold 0 -movflags +faststart \\
  -map_metadata -1 -fflags +bitexact -flags:v +bitexact vtest-300.mp4
\`\`\`

## Not committed

\`tools/models/build_clip.sh --1080p30 [OUT]\` writes a 1920x1080, 30 fps, 20 s H.264 clip
(default \`.cache/media/vtest-1080p30.mp4\`, git-ignored) for decoder/GPU benchmarks: the
300 frames above re-timed to 30 fps (10 s), played twice, scaled to 1440x1080 (Lanczos) and
pillar-boxed to 1920x1080.
EOF
    log "wrote $CLIP ($size bytes, sha256 $sha, $n frames) and $MEDIA/README.md"
fi

if [[ $HD -eq 1 ]]; then
    mkdir -p "$(dirname "$HD_OUT")"
    log "encoding 1080p30 benchmark clip -> $HD_OUT"
    # 300 frames re-timed to 30 fps = 10 s; -stream_loop 1 plays it twice = 600 frames, 20 s
    ffmpeg -nostdin -y -loglevel error -stream_loop 1 -i "$CLIP" -an \
        -vf "setpts=N/(30*TB),scale=1440:1080:flags=lanczos,pad=1920:1080:240:0:black,setsar=1" \
        -r 30 -c:v libx264 -preset medium -crf 20 -profile:v high -pix_fmt yuv420p \
        -g 30 -keyint_min 30 -sc_threshold 0 -movflags +faststart "$HD_OUT.tmp.mp4"
    mv "$HD_OUT.tmp.mp4" "$HD_OUT"
    log "wrote $HD_OUT ($(stat -c %s "$HD_OUT") bytes, $(frame_count "$HD_OUT") frames)"
fi
log "done in $((SECONDS - t0)) s"
