#!/usr/bin/env bash
# One GPU-machine call of the analytics benchmarks, run from the repository root over there.
#
# Here, first: stage the wheels the GPU machine lacks and build the 1080p clip (docs/gpu.md, "Benchmarks"):
#   CHUNK_MB=44 ../shared/device/stage-wheels onnxruntime-gpu==1.31.1 pynvvideocodec==2.2.4 pydantic==2.14.4 \
#     pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 cryptography==50.0.2 cffi==2.1.1 \
#     pycparser==3.12 lap==0.5.13 py-spy==0.4.3
#   tools/models/build_clip.sh --1080p30 .gpu-carry/vtest-1080p30.mp4    # .gpu-carry/ in .git/info/exclude
# then carry the .gpu-wheels/cNN pieces in calls back to back (mkdir -p /tmp/stage && cp .gpu-wheels/c*/* /tmp/stage/),
# and last, carrying .gpu-wheels/env and .gpu-carry:
#   bash tools/bench/gpu_session.sh diag | child | gil | pairs N [SETTING] | density N [SETTING] | trees N | tests
# DECODERS (default nvdec; nvdec-prefetch for PyNvVideoCodec's ThreadedDecoder; nvdec-replay for the clip decoded
# once and replayed from device memory, tools/bench/_replay.py) picks the pipeline cells' decoder;
# GPU_BENCH_EXTRA adds gpu_bench options to every cell (e.g. --gc-freeze).
# SDK_TREE (a folder holding sdk/src, e.g. .gpu-carry/old copied from a worktree of an older commit) runs that
# SDK under this tree's benchmarks: alternate calls with and without it to compare two commits on one host.
# trees N: N rounds of one pairs call with the SDK of OLD_TREE (default .gpu-carry/old) and one with this tree's, the
# first of each round and the order of a call's two cells alternating; $OUT/trees-summary.json compares them
# (tools/bench/pairs_summary.py). Each call is bounded by ROUND_S seconds (default 65).
# Results go to $OUT (the device tool brings them back). BUDGET (seconds, default 560) bounds the call.
set -uo pipefail
case "${1:-}" in
diag | child | gil | pairs | density | trees | tests) ;;
*) echo "usage: bash tools/bench/gpu_session.sh diag | child | gil | pairs N [SETTING] | density N [SETTING] | trees N | tests (on the GPU machine)"; exit 2 ;;
esac
mkdir -p /tmp/stage && cp .gpu-wheels/c*/* /tmp/stage/ 2>/dev/null
source .gpu-wheels/env/env.sh || { echo "staging incomplete"; exit 3; }
sdk=$(cd "${SDK_TREE:-.}" && pwd)  # SDK_TREE: another tree's sdk/ (e.g. an older commit's, carried) against this one
ours=$PWD/edge/src:$PWD/cloud/src:$PWD/proto/src${PYTHONPATH:+:$PYTHONPATH}  # all but the SDK
export PYTHONPATH=$sdk/sdk/src:$ours
mkdir -p .cache/media /tmp/efm && cp .gpu-carry/vtest-1080p30.mp4 .cache/media/
C="python3 tools/bench/gpu_bench.py --models /tmp/efm --clip .cache/media/vtest-1080p30.mp4 --only nanodet-fp32 ${GPU_BENCH_EXTRA:-}"
B="$C --suite pipeline --decoders ${DECODERS:-nvdec} --streams 64 --child-probe"
t0=$(date +%s)
step() {  # step NAME MAXSECONDS command...: bounded by what is left of BUDGET; keeps a log in $OUT
  local name=$1 max=$2 left; shift 2
  left=$(( ${BUDGET:-560} - ($(date +%s) - t0) ))
  [ "$left" -lt 30 ] && { echo "skip $name (no time left)"; return; }
  [ "$max" -gt "$left" ] && max=$left
  echo "== $name (limit ${max}s)"
  timeout "$max" "$@" > "$OUT/$name.log" 2>&1; echo "rc=$? $name"; tail -n 4 "$OUT/$name.log"
}
case "${1:-}" in
diag)  # what a thread, the analytics process and its layout cost, with CPU per thread; a GIL profile
  step diag 330 $B --analytics none,pass,track-process,track-process-inline,none,pass,track-process,track-process-inline \
    --out "$OUT/h200-analytics-diag.json"
  step gil 90 /tmp/site/bin/py-spy record --gil --threads --nonblocking --format raw -r 200 -o "$OUT/gil.txt" -- \
    $B --analytics track-process --out /tmp/gil.json
  [ -f "$OUT/gil.txt" ] && python3 tools/bench/pyspy_summary.py "$OUT/gil.txt" > "$OUT/gil-summary.txt"
  ;;
child)  # the host's CPUs, and a profile of the analytics process (and the pipeline's) in one 64-stream cell
  { lscpu; echo "SMT siblings:"; sort -u /sys/devices/system/cpu/cpu*/topology/thread_siblings_list | tr '\n' ' '; } \
    > "$OUT/lscpu.txt" 2>&1
  step child-pyspy 120 /tmp/site/bin/py-spy record --subprocesses --threads --nonblocking --format raw -r 200 \
    -o "$OUT/child-pyspy.txt" -- $B --analytics track-process-inline --out "$OUT/h200-analytics-child.json"
  [ -f "$OUT/child-pyspy.txt" ] && python3 tools/bench/pyspy_summary.py --child --top 40 "$OUT/child-pyspy.txt" > "$OUT/child-pyspy-summary.txt"
  ;;
gil)  # where the pipeline's GIL goes, by thread, without analytics and with the committed layout (one cell each)
  for a in none track-process-inline; do
    step "gil-$a" 90 /tmp/site/bin/py-spy record --gil --threads --nonblocking --format raw -r 200 -o "$OUT/gil-$a.txt" -- \
      $B --analytics "$a" --out "$OUT/h200-gil-$a.json"
    [ -f "$OUT/gil-$a.txt" ] && { python3 tools/bench/pyspy_summary.py "$OUT/gil-$a.txt"
      python3 tools/bench/pyspy_summary.py --thread edgefleet-post --top 40 "$OUT/gil-$a.txt"; } > "$OUT/gil-$a-summary.txt"
  done
  ;;
pairs | density)  # N interleaved rounds of no analytics and SETTING (a comma list; default track-process-inline)
  a=$(python3 -c "import sys; print(','.join(['none', *sys.argv[2].split(',')] * int(sys.argv[1])))" "${2:-10}" \
    "${3:-track-process-inline}")
  if [ "$1" = pairs ]; then
    step "pairs-${DECODERS:-nvdec}" $(( ${BUDGET:-560} - 20 )) $B --analytics "$a" \
      --out "$OUT/h200-analytics-pairs-${DECODERS:-nvdec}.json"
  else  # 64 streams paced at 30 fps each (the default NVDEC path), ten seconds a cell
    step density $(( ${BUDGET:-560} - 20 )) $C --child-probe --suite density --density-streams 64 --decoders nvdec --analytics "$a" \
      --out "$OUT/h200-analytics-density.json"
  fi
  ;;
trees)  # this SDK against OLD_TREE's, alternated on this host: one none/track-process-inline pair each per round
  old=${OLD_TREE:-.gpu-carry/old}
  [ -d "$old/sdk/src" ] || { echo "trees: $old/sdk/src is missing (carry it)"; exit 2; }
  for i in $(seq 1 "${2:-4}"); do
    order=(old new); cells=none,track-process-inline
    [ $((i % 2)) -eq 0 ] && { order=(new old); cells=track-process-inline,none; }
    for tree in "${order[@]}"; do
      [ "$tree" = old ] && sdk_path=$(cd "$old" && pwd) || sdk_path=$PWD
      PYTHONPATH=$sdk_path/sdk/src:$ours \
        step "trees-$tree-$i" "${ROUND_S:-65}" $B --analytics "$cells" --out "$OUT/trees-$tree-$i.json"
    done
  done
  python3 tools/bench/pairs_summary.py --group "old=$OUT/trees-old-*.json" --group "new=$OUT/trees-new-*.json" \
    --out "$OUT/trees-summary.json"
  ;;
tests)
  step gpu-tests 400 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -rs
  ;;
esac
echo "total $(( $(date +%s) - t0 ))s"
