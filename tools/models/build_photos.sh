#!/usr/bin/env bash
# Public-domain test photos from scikit-image's wheel (its data folder: astronaut, coffee, motorcycle,
# rocket, chelsea), unpacked into .cache/media/skimage/ for the classifier and face-detector tests.
# Only the wheel is downloaded (no install); idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/.cache/media/skimage}
files=(astronaut.png coffee.png motorcycle_left.png rocket.jpg chelsea.png)
if [ -d "$out" ] && for f in "${files[@]}"; do [ -s "$out/$f" ] || exit 1; done; then
  echo "photos already in $out"; exit 0
fi
py=${PYTHON:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$py" -m pip download -q --no-deps --only-binary=:all: -d "$work" scikit-image==0.26.0
mkdir -p "$out"
"$py" - "$work"/scikit_image-*.whl "$out" "${files[@]}" <<'PY'
import sys, zipfile
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for n in names:
        with open(f"{out}/{n}", "wb") as f:
            f.write(z.read(f"skimage/data/{n}"))
PY
echo "photos in $out (scikit-image 0.26.0 data folder; public domain, see scikit-image's data/README)"
