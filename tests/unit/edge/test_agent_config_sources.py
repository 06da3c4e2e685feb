"""agent.yaml: file sources (strings or mappings) are relative to the config file; anything with a scheme
of its own — a camera URL, ``synthetic:``, a plugin's ``ramp:`` — is left as written."""

from __future__ import annotations

from pathlib import Path

import yaml

from edgefleet.edge import load_agent_config


def test_only_paths_are_made_relative_to_the_config_file(tmp_path: Path, nanodet: Path) -> None:
    (tmp_path / "clips").mkdir()
    config = {
        "device_id": "cam-1",
        "require_signature": False,
        "pipelines": {
            "p": {
                "model": str(nanodet),
                "sources": [
                    "a=clips/one.mp4",
                    "b=nvdec:clips/two.mp4?gpu=0",
                    "c=ramp:?start=10",
                    "synthetic:?frames=3",
                    "rtsp://cam/x",
                    "usb:0",
                    {"type": "file", "id": "d", "path": "clips/three.mp4"},
                    {"type": "network", "id": "e", "url": "rtsp://cam/y"},
                ],
                "sinks": [{"type": "jsonl", "path": "out/results.jsonl"}],
            }
        },
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    pipe = load_agent_config(path).pipelines["p"]
    strings = [s for s in pipe.sources if isinstance(s, str)]
    assert strings == [
        f"a={tmp_path}/clips/one.mp4",
        f"b=nvdec:{tmp_path}/clips/two.mp4?gpu=0",
        "c=ramp:?start=10",
        "synthetic:?frames=3",
        "rtsp://cam/x",
        "usb:0",
    ]
    mapped = [s for s in pipe.sources if not isinstance(s, str)]
    assert getattr(mapped[0], "path", None) == tmp_path / "clips" / "three.mp4"
    assert getattr(mapped[1], "url", None) == "rtsp://cam/y"
    assert getattr(pipe.sinks[0], "path", None) == tmp_path / "out" / "results.jsonl"
