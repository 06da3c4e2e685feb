"""Model variants for the shadow tests and tools/bench/shadow_bench.py, derived from the committed
NanoDet-m 1.0.0: 2.0.0 (320 px, 6 traffic classes, tools/models/build_nanodet_320.py) and two sabotaged
copies of it that every runtime gate passes (same shapes, finite outputs, same speed):

* ``shuffled``: 2.0.1 whose labels file rotates the names of the six kept classes (person is called
  bicycle, ...): the same boxes under the wrong names, as a label order mixed up at export;
* ``blind``: 2.0.2 whose score threshold (0.99) lets nothing through, as a threshold set wrong.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.track_swap import REPO, V1, build_v2

__all__ = ["V1", "blind", "build_v2", "shuffled", "variant"]

KEEP = ["person", "bicycle", "car", "motorcycle", "bus", "truck"]


def variant(src: Path, out: Path, version: str, *, labels: list[str] | None = None, **decoder: Any) -> Path:
    """A copy of package ``src`` as ``version``, with another labels file and decoder keys; the manifest's
    files section recomputed (tools/models/_package.py)."""
    sys.path.insert(0, str(REPO / "tools" / "models"))
    from _package import write_manifest  # type: ignore[import-not-found]

    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    manifest = yaml.safe_load((out / "manifest.yaml").read_text())
    manifest["version"] = version
    manifest["decoder"].update(decoder)
    if labels is not None:
        (out / "labels.txt").write_text("\n".join(labels) + "\n")
    write_manifest(out, manifest, header=f"Sabotaged test variant {version}, derived from {manifest['name']}.")
    return out


def shuffled(v2: Path, out: Path) -> Path:
    labels = (v2 / "labels.txt").read_text().split("\n")
    labels = [x for x in labels if x]
    idx = [labels.index(k) for k in KEEP]
    rotated = list(labels)
    for i, j in zip(idx, idx[1:] + idx[:1], strict=True):
        rotated[i] = labels[j]
    return variant(v2, out, "2.0.1", labels=rotated)


def blind(v2: Path, out: Path) -> Path:
    return variant(v2, out, "2.0.2", score_threshold=0.99)
