# shellcheck shell=bash
# Shared bits for tools/models/build_*.sh (sourced, not run).
#
# Environment knobs (all optional):
#   EDGEFLEET_BUILD_WORK  work folder for downloads and throwaway venvs. Default: a fresh
#                         mktemp folder, deleted on exit. Set it to keep and reuse the
#                         venvs/downloads between runs (handy when iterating).
#   PYTHON                interpreter used to create the venvs (default: python3)

set -euo pipefail

MODELS_TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$MODELS_TOOLS_DIR/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
CACHE_MODELS_DIR="$REPO_ROOT/.cache/models"

log() { printf '[%s] %s\n' "${LOG_TAG:-models}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# setup_work: sets WORK to a work folder (EDGEFLEET_BUILD_WORK or a temp one removed on exit).
setup_work() {
    if [[ -n "${EDGEFLEET_BUILD_WORK:-}" ]]; then
        WORK="$EDGEFLEET_BUILD_WORK"
        mkdir -p "$WORK"
    else
        WORK="$(mktemp -d "${TMPDIR:-/tmp}/edgefleet-models.XXXXXX")"
        # shellcheck disable=SC2064
        trap "rm -rf '$WORK'" EXIT
    fi
    log "work folder: $WORK"
}

# pkg_ok DIR: true if DIR holds a package whose manifest's files verify.
pkg_ok() { "$PYTHON" "$MODELS_TOOLS_DIR/_package.py" verify "$1" >/dev/null 2>&1; }

_apt_updated=0
# need_cmd CMD DEBIAN_PACKAGE: install the Debian package if CMD is missing.
need_cmd() {
    local cmd="$1" pkg="$2"
    command -v "$cmd" >/dev/null 2>&1 && return 0
    log "installing Debian package $pkg (for $cmd)"
    local sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    if [[ $_apt_updated -eq 0 ]]; then
        $sudo apt-get update -qq
        _apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$pkg" >/dev/null
    command -v "$cmd" >/dev/null 2>&1 || die "$cmd still missing after installing $pkg"
}

# make_venv DIR PIP_ARGS...: create (or reuse, if the same requirements were installed
# before) a venv at DIR and pip-install PIP_ARGS into it.
make_venv() {
    local dir="$1"; shift
    local want="$*"
    if [[ -x "$dir/bin/python" && -f "$dir/.edgefleet-reqs" && "$(cat "$dir/.edgefleet-reqs")" == "$want" ]]; then
        log "reusing venv $dir"
        return 0
    fi
    rm -rf "$dir"
    log "creating venv $dir: $want"
    "$PYTHON" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@" > "$dir.pip.log" 2>&1 || {
        grep -v "is ignored: it is neither a file nor a directory" "$dir.pip.log" | tail -30 >&2
        die "pip install into $dir failed (log: $dir.pip.log)"
    }
    printf '%s' "$want" > "$dir/.edgefleet-reqs"
}

# fetch_opencv_doc DEST: apt-get download opencv-doc and unpack it into DEST (once).
# Afterwards "$DEST/usr/share/doc/opencv-doc" holds examples/data/... and the copyright file.
fetch_opencv_doc() {
    local dest="$1"
    if [[ -f "$dest/usr/share/doc/opencv-doc/examples/data/vtest.avi" ]]; then
        return 0
    fi
    need_cmd apt-get apt
    mkdir -p "$dest.deb"
    (
        cd "$dest.deb"
        if ! ls opencv-doc_*.deb >/dev/null 2>&1; then
            log "apt-get download opencv-doc"
            apt-get download opencv-doc >/dev/null 2>&1 || {
                log "apt-get download failed; running apt-get update first"
                [[ $(id -u) -eq 0 ]] && apt-get update -qq || sudo apt-get update -qq
                apt-get download opencv-doc >/dev/null
            }
        fi
    )
    mkdir -p "$dest"
    dpkg -x "$dest.deb"/opencv-doc_*.deb "$dest"
    [[ -f "$dest/usr/share/doc/opencv-doc/examples/data/vtest.avi" ]] || die "vtest.avi not found in opencv-doc"
}

# opencv_doc_version DEST: the Debian version of the unpacked opencv-doc .deb
opencv_doc_version() { basename "$1".deb/opencv-doc_*.deb | sed -e 's/^opencv-doc_//' -e 's/_all\.deb$//'; }

# npm_pack SPEC DEST: npm pack SPEC into DEST (once); prints the tarball path.
npm_pack() {
    local spec="$1" dest="$2"
    need_cmd npm npm
    mkdir -p "$dest"
    local tgz
    tgz="$(ls "$dest"/*.tgz 2>/dev/null | head -1 || true)"
    if [[ -z "$tgz" ]]; then
        log "npm pack $spec"
        (cd "$dest" && npm pack "$spec" --silent >/dev/null 2>&1) || die "npm pack $spec failed"
        tgz="$(ls "$dest"/*.tgz | head -1)"
    fi
    printf '%s\n' "$tgz"
}
