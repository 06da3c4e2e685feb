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


def test_unreachable_camera_retries_with_the_password_redacted(toy_models: dict[str, Path], tmp_path: Path) -> None:
    import signal
    import time

    log = tmp_path / "stderr.txt"
    with log.open("w") as err_file:
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
            stderr=err_file,
            text=True,
        )
    # a live camera that is down is retried with backoff, not abandoned: wait for the first retry (the
    # model loads first, slowly on a loaded machine; a Ctrl-C before the run started is a plain 130)
    deadline = time.monotonic() + 60
    while "retrying" not in log.read_text() and time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    time.sleep(2)
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)  # Ctrl-C: clean shutdown
    out, _ = proc.communicate(timeout=30)
    err = log.read_text()
    # a camera that never delivered is not a run that is "done" (it used to exit 0)
    assert proc.returncode == 1, err
    assert "error: stopped before any source delivered a frame: s0 reconnecting (refused)" in err
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
    assert info["decoder_built_in"] is True


def test_models_inspect_says_when_the_decoder_is_not_built_in(nanodet: Path, tmp_path: Path) -> None:
    import shutil

    pkg = tmp_path / "custom"
    shutil.copytree(nanodet, pkg)
    manifest = pkg / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("type: nanodet", "type: people-count"))
    info = json.loads(_run("models", "inspect", str(pkg), "--json").stdout)
    assert info["decoder_built_in"] is False
    res = _run("models", "inspect", str(pkg))
    assert res.returncode == 0 and "is not a built-in decoder" in res.stdout


def test_outputs_that_would_overwrite_inputs_are_refused(nanodet: Path, clip: Path, tmp_path: Path) -> None:
    import shutil

    video = tmp_path / "in.mp4"
    shutil.copy(clip, video)
    package = tmp_path / "pkg"
    shutil.copytree(nanodet, package)
    before = video.read_bytes(), (package / "manifest.yaml").read_bytes()
    for args, what in [
        (["--jsonl", str(video)], "would write over source s0"),
        (["--out", str(video)], "would write over source s0"),
        (["--jsonl", str(package / "manifest.yaml")], "would write over the model package"),
        (["--jsonl", str(tmp_path / "x.mp4"), "--out", str(tmp_path / "x.mp4")], "two sinks write the same file"),
    ]:
        res = _run("run", "--model", str(package), "--source", str(video), "-q", *args)
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert what in res.stderr
    assert (video.read_bytes(), (package / "manifest.yaml").read_bytes()) == before


def test_path_mistakes_are_one_line_each(nanodet: Path, tmp_path: Path) -> None:
    """A file where a folder goes, a folder where a file goes, binary bytes for YAML, a folder that takes no
    new file: one line each, before any work is done (the video sink used to fail only at the end)."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    binary = tmp_path / "config.yaml"
    binary.write_bytes(bytes(range(128, 256)))
    run = ["run", "--model", str(nanodet), "--source", "synthetic:?frames=3", "-q"]
    cases = [
        (["keys", "generate", "--out-dir", str(afile)], f"{afile}: exists, and is not a folder"),
        (["run", "--config", str(binary)], f"{binary}: not a YAML file (not UTF-8 text)"),
        ([*run, "--out", str(tmp_path)], f"{tmp_path}: is a folder"),
        ([*run, "--out", str(tmp_path / "x.txt")], "an annotated video is written as .mkv, .mov, .mp4"),
    ]
    cases.append((["controller", "serve", "--log-level", "LOUD"], "--log-level must be one of DEBUG, INFO"))
    cases.append((["devices", "ls", "-c", "http://ctl:50051"], "controller address must be host:port"))
    cases.append((["keys", "generate", "--name", "../escape", "--out-dir", str(tmp_path)], "a file name stem"))
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"model: {nanodet}\nsources: ['synthetic:?frames=3']\n")
    cases.append((["run", "--config", str(config), "--batch", "4"], "--config takes the place of --batch"))
    cases.append((["run", "--config", str(config), "--jsonl", str(config)], "would write over the config"))
    cases.append(([*run, "--score", "nan"], "score_threshold: Input should be a finite number"))
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("model: [1, 2]\nsources: ['synthetic:']\nbackend: {type: magic}\n")
    cases.append(
        (
            ["run", "--config", str(wrong)],
            "model: must be a path (a string); backend: unknown backend 'magic' (known: ",
        )
    )
    if Path("/sys").is_dir():  # refuses new files even to root
        cases.append(([*run, "--out", "/sys/x.mp4"], "/sys/x.mp4: cannot write in /sys"))
    for args, message in cases:
        res = _run(*args)
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert message in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_error_text_is_printed_as_is(tmp_path: Path) -> None:
    """rich must not read user text as markup or emoji codes (``a:fire:b`` is not a flame)."""
    res = _run(
        "controller", "serve", "--revoked-key", "a:fire:b[bold]", "--insecure", "--allow-unsigned",
        "--db", f"sqlite:///{tmp_path / 'c.db'}", "--data-dir", str(tmp_path / "data"),
    )  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "not a publisher key id (16 hex digits, `edgefleet keys`): a:fire:b[bold]" in res.stderr


def test_version_prints_each_installed_distribution_once_from_its_metadata() -> None:
    from importlib.metadata import version

    res = _run("--version")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines == [
        f"{d} {version(d)}" for d in ("edgefleet-sdk", "edgefleet-proto", "edgefleet-edge", "edgefleet-cloud")
    ]
