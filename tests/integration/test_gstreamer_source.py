"""GStreamer pipeline strings through PyGObject, with Debian's GStreamer.

PyGObject is not on PyPI as a wheel; Debian ships it for the system Python (same 3.11 ABI as the test
interpreter here). The test puts only its ``gi`` package on sys.path, from a temporary folder, exactly
as JetPack's python3-gi would be found on a Jetson.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edgefleet.sdk import Pipeline

SYSTEM_GI = Path("/usr/lib/python3/dist-packages/gi")
pytestmark = pytest.mark.integration


@pytest.fixture
def gi_on_path(tmp_path: Path):  # type: ignore[no-untyped-def]
    if not SYSTEM_GI.is_dir() or sys.version_info[:2] != (3, 11):
        pytest.skip("Debian's python3-gi (for Python 3.11) is not installed")
    link = tmp_path / "gi-only"
    link.mkdir()
    (link / "gi").symlink_to(SYSTEM_GI)
    sys.path.insert(0, str(link))
    try:
        import warnings

        from edgefleet.sdk._sources._gstreamer import gstreamer_available

        with warnings.catch_warnings():  # Debian's gi 3.42 still uses the legacy load_module() importer
            warnings.simplefilter("ignore", ImportWarning)
            available = gstreamer_available()
        if not available:
            pytest.skip("GStreamer 1.0 introspection data is not installed")
        yield
    finally:
        sys.path.remove(str(link))


def test_gstreamer_pipeline_string_runs_to_end_of_stream(gi_on_path: None, toy_models: dict[str, Path]) -> None:
    desc = "gst:videotestsrc num-buffers=30 is-live=true ! video/x-raw,width=320,height=240,framerate=30/1"
    with Pipeline(toy_models["yolo"], [desc]) as p:
        results = list(p.results())
        stats = p.stats()
    assert stats.frames_in == 30
    assert len(results) + stats.dropped == 30
    assert results[0].frame_width == 320 and results[0].frame_height == 240
    # one counted copy per frame: out of the GStreamer buffer into the pool slot
    assert stats.copies["counts"]["host_to_host"] == 30


def test_bad_gstreamer_pipeline_is_a_clear_error(gi_on_path: None, toy_models: dict[str, Path]) -> None:
    from edgefleet.sdk import PipelineError

    with pytest.raises(PipelineError, match="does not parse|no element"), \
            Pipeline(toy_models["yolo"], ["gst:nosuchelement ! fakesink"]) as p:
        list(p.results())
