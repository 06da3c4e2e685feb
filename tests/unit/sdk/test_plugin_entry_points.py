"""An application's plugin, installed as a distribution (tests/plugins/edgefleet-example-plugin, put in
the test venv by the Makefile), is loaded through its entry points by ``edgefleet run`` with no code
change: one entry of every kind (a source, a backend, a decoder, an analytics stage, a sink), and one
whose library is missing. tests/integration/test_plugins_in_agent.py runs the same plugin under the agent."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.onnx_models import write_package

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))
KINDS = ("sources", "backends", "decoders", "sinks", "analytics")
# ramp r1: grey 150, 190, 230, 255, 255, 255 -> "bright" from 230 on (threshold 0.9 of 255); the debounce
# stage reports a change once it held for 2 frames. ramp r2: grey 0 throughout.
R1 = ["dark", "dark", "dark", "bright", "bright", "bright"]
R2 = ["dark", "dark", "dark"]


@pytest.fixture(scope="module", autouse=True)
def _plugin_installed() -> None:
    for kind in KINDS:
        if not any(
            ep.dist and ep.dist.name == "edgefleet-example-plugin" for ep in entry_points(group=f"edgefleet.{kind}")
        ):
            pytest.fail(f"the example plugin's edgefleet.{kind} entry is not installed: run `make .venv/.installed`")


def numpy_package(root: Path) -> Path:
    """A package for the plugin's NumPy backend (no ONNX at all), read by the plugin's decoder."""
    root.mkdir(parents=True)
    (root / "model.json").write_text(
        json.dumps(
            {
                "op": "mean",
                "input": {"name": "images", "shape": [-1, 3, 16, 16], "dtype": "float32"},
                "output": {"name": "mean", "shape": [-1, 1]},
            }
        )
    )
    return write_package(
        root,
        name="brightness",
        version="1.0.0",
        task="classification",
        model_file="model.json",
        input_spec={
            "name": "images",
            "shape": [-1, 3, 16, 16],
            "dtype": "float32",
            "resize": "stretch",
            "std": [255.0, 255.0, 255.0],
        },
        outputs=[{"name": "mean", "shape": [-1, 1]}],
        decoder={"type": "example-mean", "threshold": 0.9},
    )


def plugin_pipeline(tmp_path: Path, out: Path) -> dict[str, Any]:
    """A pipeline made of the plugin's parts only (the model package too is the backend's own format)."""
    return {
        "model": str(numpy_package(tmp_path / "pkg")),
        "sources": [
            "r1=ramp:?start=150&step=40&frames=6",
            {"type": "example-ramp", "id": "r2", "start": 0, "step": 0, "frames": 3},
        ],
        "backend": {"type": "example-numpy"},
        "max_batch": 2,
        "analytics": [{"type": "example-debounce", "frames": 2}],
        "sinks": [{"type": "example-csv", "path": str(out)}],
    }


def csv_labels(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    with path.open(newline="") as f:
        for row in sorted(csv.DictReader(f), key=lambda r: (r["stream"], int(r["sequence"]))):
            out.setdefault(row["stream"], []).append(row["label"])
    return out


def _edgefleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, timeout=120, check=False)


def test_edgefleet_run_loads_one_plugin_of_every_kind(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(plugin_pipeline(tmp_path, tmp_path / "out.csv")))
    res = _edgefleet("run", "--config", str(config), "--json")
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout)
    assert stats["results"] == 9 and stats["model"] == "brightness:1.0.0"
    assert stats["analytics"] == {"example-debounce": {"label_changes_total": 1, "model_changes_total": 0}}
    assert csv_labels(tmp_path / "out.csv") == {"r1": R1, "r2": R2}


def test_edgefleet_run_flags_take_a_plugins_source_string_and_backend(tmp_path: Path) -> None:
    pkg = numpy_package(tmp_path / "pkg")
    out = tmp_path / "out.jsonl"
    args = ("--model", str(pkg), "--source", "ramp:?start=250&frames=4", "--backend", "example-numpy")
    res = _edgefleet("run", *args, "--jsonl", str(out), "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["classifications"][0]["label"] for r in rows] == ["bright"] * 4
    bad = _edgefleet("run", *args[:-1], "example-nothing")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "unknown backend 'example-nothing' (known: example-numpy, onnxruntime, tensorrt)" in bad.stderr


def test_a_plugin_entry_whose_library_is_missing_names_the_extra(tmp_path: Path) -> None:
    data = plugin_pipeline(tmp_path, tmp_path / "out.csv")
    manifest = Path(data["model"]) / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("type: example-mean", "type: example-gpu-only"))
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(data))
    res = _edgefleet("run", "--config", str(config))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "decoder 'example-gpu-only' is not available" in res.stderr
    assert "pip install 'edgefleet-example-plugin[gpu]'" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_the_agents_events_sink_says_it_needs_the_agent(tmp_path: Path) -> None:
    data = plugin_pipeline(tmp_path, tmp_path / "out.csv")
    data["sinks"].append({"type": "events"})  # registered by edgefleet-edge's entry point
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(data))
    res = _edgefleet("run", "--config", str(config))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "the events sink publishes through the agent's telemetry" in res.stderr


def test_edgefleet_plugins_lists_every_kinds_entries_and_what_dropped_out() -> None:
    res = _edgefleet("plugins", "--json")
    assert res.returncode == 0, res.stderr
    rows = {(r["kind"], r["type"]): r for r in json.loads(res.stdout)}
    for kind, key in (("source", "example-ramp"), ("backend", "example-numpy"), ("decoder", "example-mean")):
        assert "of edgefleet-example-plugin" in rows[kind, key]["from"]
    assert ("sink", "example-csv") in rows and ("analytics", "example-debounce") in rows
    assert rows["sink", "events"]["from"].endswith("of edgefleet-edge")
    assert rows["backend", "onnxruntime"] == {
        "kind": "backend",
        "type": "onnxruntime",
        "from": "built-in",
        "extra": "cpu",
    }
    assert "pip install 'edgefleet-example-plugin[gpu]'" in rows["decoder", "example-gpu-only"]["unavailable"]


def test_models_inspect_names_where_a_plugin_decoder_comes_from(tmp_path: Path) -> None:
    pkg = numpy_package(tmp_path / "pkg")
    info = json.loads(_edgefleet("models", "inspect", str(pkg), "--json", "--no-load").stdout)
    assert info["decoder_built_in"] is False
    assert "edgefleet_example_plugin.decoders:register of edgefleet-example-plugin" in info["decoder_from"]
    manifest = pkg / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("threshold: 0.9", "threshold: high"))
    res = _edgefleet("models", "inspect", str(pkg), "--no-load")
    assert res.returncode == 1 and "decoder (example-mean): threshold: Input should be a valid number" in res.stderr
