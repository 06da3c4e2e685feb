"""The ``edgefleet`` command as a user runs it: real subprocesses of the installed script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEFLEET, *args], capture_output=True, text=True, timeout=timeout, check=False)


def test_help_does_not_import_inference_or_video_libraries() -> None:
    code = (
        "import sys\n"
        "from edgefleet.sdk._cli._app import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy_libs = {'cv2', 'onnxruntime', 'tensorrt', 'cuda', 'av', 'cupy', 'torch',\n"
        "              'numpy', 'pydantic', 'sqlalchemy', 'paho', 'grpc'}  # the SDK facade loads lazily\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in heavy_libs]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout
    assert "run" in out.stdout and "models" in out.stdout


def test_missing_model_is_one_clear_line() -> None:
    res = _run("run", "--model", "/no/such/pkg", "--source", "synthetic:")
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert "no such model package" in res.stderr


def test_missing_source_is_one_clear_line(toy_models: dict[str, Path]) -> None:
    res = _run("run", "--model", str(toy_models["yolo"]), "--source", "/no/such/clip.mp4")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "/no/such/clip.mp4: no such file" in res.stderr


def test_bad_manifest_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "manifest.yaml").write_text("format: edgefleet.model/v1\nname: x\n")
    res = _run("models", "inspect", str(tmp_path))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "manifest.yaml" in res.stderr and "version" in res.stderr


def test_unreachable_camera_retries_with_the_password_redacted(toy_models: dict[str, Path]) -> None:
    import signal
    import time

    proc = subprocess.Popen(
        [
            EDGEFLEET,
            "run",
            "--model",
            str(toy_models["yolo"]),
            "--source",
            "rtsp://admin:hunter2@127.0.0.1:1/x",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4)  # a live camera that is down is retried with backoff, not abandoned
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)  # Ctrl-C: clean shutdown
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "hunter2" not in out + err
    assert "admin:***@127.0.0.1:1/x" in err and "retrying" in err


def test_run_json_summary_and_outputs(nanodet: Path, clip: Path, tmp_path: Path) -> None:
    res = _run(
        "run",
        "--model",
        str(nanodet),
        "--source",
        str(clip),
        "--max-frames",
        "12",
        "--batch",
        "2",
        "--jsonl",
        str(tmp_path / "d.jsonl"),
        "--out",
        str(tmp_path / "a.mp4"),
        "--json",
    )
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout)
    assert stats["results"] == 12 and stats["dropped"] == 0
    assert stats["model"] == "nanodet-m:1.0.0"
    assert stats["detections_by_label"]["person"] > 12
    assert set(stats["stages"]) >= {"preprocess", "infer", "postprocess", "end_to_end"}
    assert len((tmp_path / "d.jsonl").read_text().splitlines()) == 12
    assert (tmp_path / "a.mp4").stat().st_size > 10_000


def test_models_inspect_json(nanodet: Path) -> None:
    res = _run("models", "inspect", str(nanodet), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["ref"] == "nanodet-m:1.0.0" and info["verified"] is True
    assert info["model_io"]["inputs"][0]["name"] == "image"
