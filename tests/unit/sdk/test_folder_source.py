"""Image folders as a new user feeds them (issue 19's findings): one unreadable image aborted the whole
run (the JSONL kept 0-14 of the good frames), and results did not name the file they came from."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgefleet.sdk import Pipeline, SourceError

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


def _folder(root: Path, good: int = 20) -> Path:
    """``good`` real PNGs, one truncated JPEG and one text file among them (sorted in between)."""
    import cv2

    root.mkdir()
    for i in range(good):
        cv2.imwrite(str(root / f"img{i:03d}.png"), np.full((48, 64, 3), i * 10, np.uint8))
    ok, jpeg = cv2.imencode(".jpg", np.zeros((48, 64, 3), np.uint8))
    assert ok
    (root / "img005b.jpg").write_bytes(jpeg.tobytes()[:40])  # cut short: cv2.imread gives None
    (root / "img010b.txt").write_text("a note left among the images")
    (root / ".hidden.png").write_bytes(b"")  # dotfiles are not the user's images
    return root


def test_an_unreadable_image_is_skipped_with_one_warning_and_counted(
    toy_models: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _folder(tmp_path / "frames")
    caplog.set_level(logging.WARNING, logger="edgefleet")
    with Pipeline(toy_models["yolo"], [f"cam={folder}"], max_batch=4) as p:
        results = list(p.results())
        stats = p.stats()
    assert len(results) == 20  # every good image, none lost to the bad one
    assert [Path(r.source).name for r in results] == [f"img{i:03d}.png" for i in range(20)]
    assert all(Path(r.source).parent == folder for r in results)
    assert stats.streams["cam"].skipped == 2 and not stats.streams["cam"].failed
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("img005b.jpg: skipped, not a readable image" in w for w in warnings) == 1
    assert sum("img010b.txt: skipped, not an image file" in w for w in warnings) == 1
    assert not any(".hidden" in w for w in warnings)


def test_jsonl_from_a_folder_names_each_file(toy_models: dict[str, Path], tmp_path: Path) -> None:
    folder = _folder(tmp_path / "frames", good=6)
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [EDGEFLEET, "run", "-m", str(toy_models["yolo"]), "-s", str(folder), "--jsonl", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [Path(x["source"]).name for x in lines] == [f"img{i:03d}.png" for i in range(6)]
    assert "img005b.jpg: skipped" in res.stderr


def test_a_video_file_names_itself_in_every_result(toy_models: dict[str, Path], clip: Path) -> None:
    with Pipeline(toy_models["yolo"], [str(clip)], max_frames=3) as p:
        sources = {r.source for r in p.results()}
    assert sources == {str(clip)}


def test_a_folder_with_no_readable_image_fails_with_one_error(toy_models: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(b"not a jpeg")
    (folder / "b.png").write_bytes(b"")
    p = Pipeline(toy_models["yolo"], [str(folder)])
    with pytest.raises(Exception, match=r"none of its 2 images can be read"):
        p.run()


def test_one_image_file_that_cannot_be_read_is_an_error(toy_models: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "photo.jpg"
    bad.write_bytes(b"not a jpeg")
    from edgefleet.sdk._sources import create_source, parse_source

    src = create_source(parse_source(str(bad)))
    src.open()
    with pytest.raises(SourceError, match="not a readable image"):
        src.read(None)
