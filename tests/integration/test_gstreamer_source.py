"""GStreamer pipeline strings through PyGObject, with Debian's GStreamer.

PyGObject has no wheel on PyPI; Debian ships it for the system Python (same 3.11 ABI as the test
interpreter here). Each test runs in a child interpreter that finds only Debian's ``gi`` package on its
path, exactly as JetPack's python3-gi is found on a Jetson, and keeps GStreamer's libraries out of the
pytest process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SYSTEM_GI = Path("/usr/lib/python3/dist-packages/gi")
REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not SYSTEM_GI.is_dir() or sys.version_info[:2] != (3, 11),
        reason="Debian's python3-gi (for Python 3.11) is not installed",
    ),
]


def _run(tmp_path: Path, body: str) -> dict[str, object]:
    link = tmp_path / "gi-only"
    link.mkdir()
    (link / "gi").symlink_to(SYSTEM_GI)
    script = textwrap.dedent("""
        import json, sys, warnings
        warnings.simplefilter("ignore", ImportWarning)  # Debian's gi 3.42 uses the legacy importer
        from pathlib import Path
        from edgefleet.sdk import Pipeline, PipelineError
        from edgefleet.sdk._sources._gstreamer import gstreamer_available
        from tests.support.onnx_models import yolo_package
        if not gstreamer_available():
            print(json.dumps({"skip": "GStreamer 1.0 introspection data is not installed"}))
            sys.exit(0)
        model = yolo_package(Path(sys.argv[1]) / "model")
    """) + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(link), str(REPO)]))
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(str(result["skip"]))
    return result


def test_gstreamer_pipeline_string_runs_to_end_of_stream(tmp_path: Path) -> None:
    r = _run(
        tmp_path,
        """
        desc = "gst:videotestsrc num-buffers=30 is-live=true ! video/x-raw,width=320,height=240,framerate=30/1"
        with Pipeline(model, [desc]) as p:
            results = list(p.results())
            s = p.stats()
        print(json.dumps({"n": len(results), "frames_in": s.frames_in, "dropped": s.dropped,
                          "w": results[0].frame_width, "h": results[0].frame_height,
                          "copies": s.copies["counts"]["host_to_host"]}))
    """,
    )
    assert r["frames_in"] == 30
    assert r["n"] + r["dropped"] == 30  # type: ignore[operator]
    assert (r["w"], r["h"]) == (320, 240)
    assert r["copies"] == 30  # one counted copy per frame: out of the GStreamer buffer into the slot


def test_bad_gstreamer_pipeline_is_a_clear_error(tmp_path: Path) -> None:
    r = _run(
        tmp_path,
        """
        try:
            with Pipeline(model, ["gst:nosuchelement ! fakesink"]) as p:
                list(p.results())
            print(json.dumps({"error": None}))
        except PipelineError as exc:
            print(json.dumps({"error": str(exc)}))
    """,
    )
    assert "does not parse" in str(r["error"]) and "nosuchelement" in str(r["error"])
