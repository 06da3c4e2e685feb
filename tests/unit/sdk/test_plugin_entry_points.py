"""An application's plugin, installed as a distribution (tests/plugins/edgefleet-example-plugin, put in
the test venv by the Makefile), is loaded through its entry points by ``edgefleet run`` and by the agent
with no code change: one entry of every kind, and one whose library is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.onnx_models import identity_model, write_package

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))
# synthetic frames 0-2 are colour bars (mean ~0.5 of full scale: "dark" under the 0.9 threshold), 3 on
# are white ("bright"); the debounce stage reports a change once it held 2 frames
DEBOUNCED = ["dark", "dark", "dark", "dark", "bright", "bright", "bright"]


@pytest.fixture(scope="module", autouse=True)
def _plugin_installed() -> None:
    names = {ep.name for ep in entry_points(group="edgefleet.decoders")}
    if "example-mean" not in names:
        pytest.fail("the example plugin is not installed in this venv: run `make .venv/.installed`")


def _brightness_package(root: Path) -> Path:
    """The identity model (its output is its input), read by the plugin's decoder."""
    root.mkdir(parents=True)
    identity_model(root / "model.onnx", size=32)
    return write_package(
        root,
        name="brightness",
        version="1.0.0",
        task="classification",
        input_spec={
            "name": "images",
            "shape": [-1, 3, 32, 32],
            "dtype": "float32",
            "resize": "stretch",
            "std": [255.0, 255.0, 255.0],
        },
        outputs=[{"name": "out", "shape": [-1, 3, 32, 32]}],
        decoder={"type": "example-mean", "threshold": 0.9},
    )


def _pipeline(tmp_path: Path) -> dict[str, Any]:
    return {
        "model": str(_brightness_package(tmp_path / "pkg")),
        "sources": ["cam=synthetic:?width=64&height=48&frames=7&white_after=3&live=false"],
        "analytics": [{"type": "example-debounce", "frames": 2}],
        "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")}],
    }


def _edgefleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, timeout=120, check=False)


def _labels(path: Path) -> list[str]:
    return [json.loads(line)["classifications"][0]["label"] for line in path.read_text().splitlines()]


def test_edgefleet_run_loads_the_plugins_decoder_and_analytics(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(_pipeline(tmp_path)))
    res = _edgefleet("run", "--config", str(config), "--json")
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout)
    assert stats["results"] == 7
    assert stats["analytics"] == {"example-debounce": {"label_changes_total": 1, "model_changes_total": 0}}
    assert _labels(tmp_path / "out.jsonl") == DEBOUNCED


def test_a_plugin_entry_whose_library_is_missing_names_the_extra(tmp_path: Path) -> None:
    data = _pipeline(tmp_path)
    manifest = Path(data["model"]) / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("type: example-mean", "type: example-gpu-only"))
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(data))
    res = _edgefleet("run", "--config", str(config))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "decoder 'example-gpu-only' is not available" in res.stderr
    assert "pip install 'edgefleet-example-plugin[gpu]'" in res.stderr
