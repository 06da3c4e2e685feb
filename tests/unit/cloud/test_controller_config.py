"""``edgefleet controller serve --config controller.yaml``: the file's keys are the flags' names, flags
given on the command line win, and a bad file or field is one line naming both (no traceback); the
settings model itself is strict (unknown or mistyped fields refused, as SettingsError)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from edgefleet.cloud import ControllerSettings, InvalidArgumentError
from edgefleet.cloud._controller_file import ControllerFile, load_controller_file
from edgefleet.cloud._errors import SettingsError
from edgefleet.sdk import EdgefleetError

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))


def _edgefleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEFLEET, *args], check=False, capture_output=True, text=True, timeout=60)


def _serve(tmp_path: Path, config: str, *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "controller.yaml"
    path.write_text(config)
    cmd = [EDGEFLEET, "controller", "serve", "--config", str(path), "--db", f"sqlite:///{tmp_path}/c.db", *flags]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)


def _one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert res.returncode != 0, res
    assert "Traceback" not in res.stderr, res.stderr
    # log lines (with or without their timestamp) are not the error line
    lines = [line for line in res.stderr.splitlines() if line.strip() and not re.match(r"(\S+ )?WARNING ", line)]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_an_unknown_key_names_the_file_and_the_key(tmp_path: Path) -> None:
    _one_line_error(_serve(tmp_path, "lisen: 127.0.0.1:0\n"), "controller.yaml", "lisen", "not permitted")


def test_a_mistyped_value_names_the_file_and_the_key(tmp_path: Path) -> None:
    _one_line_error(_serve(tmp_path, "max_attempts: many\n"), "controller.yaml", "max_attempts", "integer")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("listen: [unclosed\n", "not valid YAML at line 2"),
        ("- a\n- b\n", "expected a mapping"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_bad_file_is_one_line(tmp_path: Path, text: str | bytes, needle: str) -> None:
    path = tmp_path / "controller.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    res = _edgefleet("controller", "serve", "--config", str(path))
    _one_line_error(res, str(path), needle)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    res = _edgefleet("controller", "serve", "--config", str(tmp_path / "nope.yaml"))
    _one_line_error(res, "nope.yaml", "no such config file")


def test_the_files_values_apply_and_flags_given_win(tmp_path: Path) -> None:
    # The file's status interval applies (the controller refuses it, naming the setting)...
    config = "insecure: true\nallow_unsigned: true\nstatus_interval: -1\n"
    _one_line_error(_serve(tmp_path, config), "status_interval_s")
    # ...and a flag given on the command line replaces it: the next refusal is about another setting.
    res = _serve(tmp_path, config, "--status-interval", "5", "--health-window", "-5")
    line = _one_line_error(res, "default_health_window_s")
    assert "status_interval_s" not in line


def test_relative_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "controller.yaml"
    path.write_text("data_dir: state\ntrusted_key: [keys/a.pub.pem, /abs/b.pub.pem]\nmqtt: null\n")
    assert load_controller_file(path) == {
        "data_dir": tmp_path / "etc" / "state",
        "trusted_key": [tmp_path / "etc" / "keys/a.pub.pem", Path("/abs/b.pub.pem")],
    }


def test_every_file_key_is_a_serve_flag() -> None:
    import typer.main

    from edgefleet.sdk._cli._app import build

    root = typer.main.get_command(build().app)
    serve = root.commands["controller"].commands["serve"]  # type: ignore[attr-defined]
    params = {p.name for p in serve.params}
    assert set(ControllerFile.model_fields) == params - {"ctx", "config"}


def test_the_settings_model_is_strict() -> None:
    with pytest.raises(SettingsError, match="lisen: Extra inputs are not permitted"):
        ControllerSettings(lisen="127.0.0.1:0")  # type: ignore[call-arg]
    with pytest.raises(SettingsError, match="listen: Input should be a valid string"):
        ControllerSettings(listen=5)  # type: ignore[arg-type]
    assert issubclass(SettingsError, InvalidArgumentError)
    assert ControllerSettings.model_fields["listen"].description


def test_every_member_error_derives_from_the_sdk_root() -> None:
    from edgefleet.cloud import CloudError
    from edgefleet.cloud._telemetry import TelemetryIngestError
    from edgefleet.edge import AgentError
    from edgefleet.edge._telemetry import TelemetryError

    for cls in (AgentError, CloudError, TelemetryError, TelemetryIngestError, SettingsError):
        assert issubclass(cls, EdgefleetError), cls
    assert issubclass(TelemetryError, AgentError) and issubclass(TelemetryIngestError, CloudError)


def test_a_user_error_in_each_cli_is_one_line(tmp_path: Path) -> None:
    agent = _edgefleet("agent", "--config", str(tmp_path / "agent.yaml"))
    _one_line_error(agent, "agent.yaml", "no such config file")
    tail = _edgefleet("telemetry", "tail", "cam-1", "--broker", "ftp://x")
    _one_line_error(tail, "mqtt://")
