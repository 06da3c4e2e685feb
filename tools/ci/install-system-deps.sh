#!/usr/bin/env bash
# Install the Debian 12 packages edgefleet's tests and demo need.
#
# Idempotent and non-interactive: if every package is already installed
# (checked with dpkg-query), it exits without touching apt at all, so CI can
# call it on every run for free.
#
# Usage: tools/ci/install-system-deps.sh [--check]
#   --check   only report missing packages; exit 1 if any are missing.
#
# Runs apt-get directly when root, via sudo otherwise.
set -euo pipefail

PACKAGES=(
  # H.264 encoding of test clips
  ffmpeg
  # RTSP test server (tools/rtsp/serve.py, run with /usr/bin/python3)
  python3-gi
  gir1.2-glib-2.0
  gir1.2-gstreamer-1.0
  gir1.2-gst-plugins-base-1.0
  gir1.2-gst-rtsp-server-1.0
  gstreamer1.0-plugins-base
  gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad
  gstreamer1.0-plugins-ugly
  gstreamer1.0-libav
  gstreamer1.0-tools
  # MQTT broker + CLI clients for sink tests and the demo
  mosquitto
  mosquitto-clients
  # promtool (metrics and alert-rule checks) and a real Prometheus for tests/integration/test_prometheus.py
  prometheus
)

log() { printf '[install-system-deps] %s\n' "$*"; }

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  log "all ${#PACKAGES[@]} packages already installed; skipping apt"
  exit 0
fi

log "missing: ${missing[*]}"
if [[ "${1:-}" == "--check" ]]; then
  exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

# Wait (up to 10 min) for another apt/dpkg run instead of failing on the lock.
APT_OPTS=(-o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0)

log "apt-get update"
"${SUDO[@]}" apt-get "${APT_OPTS[@]}" update -qq

log "apt-get install ${#missing[@]} package(s) (--no-install-recommends)"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -qq \
  --no-install-recommends "${missing[@]}" >/dev/null

log "verifying GStreamer RTSP server import with /usr/bin/python3"
/usr/bin/python3 -c "import gi; gi.require_version('Gst','1.0'); gi.require_version('GstRtspServer','1.0'); from gi.repository import Gst, GstRtspServer; Gst.init(None)"
for el in x264enc rtph264pay h264parse qtdemux avdec_h264 videotestsrc; do
  gst-inspect-1.0 --exists "$el" || { log "ERROR: GStreamer element $el missing"; exit 1; }
done
log "done"
