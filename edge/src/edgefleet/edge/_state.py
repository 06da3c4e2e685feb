"""The agent's state on disk: what each pipeline serves (last-good), what it served before, the packages
it holds, and the outcome of every command it has executed (so a duplicate or replay has no effect).

Written atomically (temporary file, fsync, rename), so a power cut leaves the old or the new state."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["AgentState"]

_log = logging.getLogger(__name__)
MAX_COMMANDS = 500


class AgentState:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.serving: dict[str, dict[str, str]] = {}  # pipeline -> {ref, sha256, path}
        self.previous: dict[str, dict[str, str]] = {}
        self.packages: dict[str, dict[str, str]] = {}  # ref -> {sha256, path}
        self.commands: dict[str, dict[str, Any]] = {}  # command id -> outcome
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            self._move_aside(str(exc))
            return
        problem = _shape_problem(data)
        if problem:  # valid JSON of another shape used to crash every start (a restart loop under systemd)
            self._move_aside(problem)
            return
        self.serving = data.get("serving", {})
        self.previous = data.get("previous", {})
        self.packages = data.get("packages", {})
        self.commands = data.get("commands", {})

    def _move_aside(self, why: str) -> None:
        bad = self.path.with_suffix(".corrupt")
        _log.error("agent state %s unreadable (%s); moved aside to %s, starting from the config", self.path, why, bad)
        os.replace(self.path, bad)

    def save(self) -> None:
        with self._lock:
            data = {
                "serving": self.serving,
                "previous": self.previous,
                "packages": self.packages,
                "commands": dict(list(self.commands.items())[-MAX_COMMANDS:]),
            }
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".state-", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def record_command(self, command_id: str, ok: bool, message: str, model_ref: str) -> None:
        self.commands[command_id] = {"ok": ok, "message": message, "model_ref": model_ref, "at": time.time()}
        self.save()


def _shape_problem(data: object) -> str | None:
    """What is wrong with a parsed state file's shape, or None."""
    if not isinstance(data, dict):
        return f"expected an object, got {type(data).__name__}"
    for key in ("serving", "previous", "packages"):
        table = data.get(key, {})
        if not isinstance(table, dict):
            return f"{key} is not an object"
        for name, entry in table.items():
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                return f"{key}.{name} is not an object of strings"
    commands = data.get("commands", {})
    if not isinstance(commands, dict) or not all(isinstance(v, dict) for v in commands.values()):
        return "commands is not an object of objects"
    return None
