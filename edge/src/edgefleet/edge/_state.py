"""The agent's state on disk: what each pipeline serves (last-good), what it served before, the packages
it holds, and the outcome of every command it has executed (so a duplicate or replay has no effect).

Written atomically (temporary file, fsync, rename, fsync of the folder), so a power cut leaves the old or
the new state; a temporary file that a kill left behind is removed at the next start. ``durable`` is the
last-good table as it is on disk: what the agent reports as each pipeline's last-good, so a version is
never reported last-good before it is written.

An apply's outcome is *provisional* from its cut-over until its health window ends (the new version
serves, it is not last-good yet). A restart inside the window interrupts the command, as a restart in the
middle of a download does: the provisional outcome is dropped at start-up, so the command runs again when
it comes again instead of being answered "serving" by a device that does not serve it."""

from __future__ import annotations

import contextlib
import copy
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
        self.durable: dict[str, dict[str, str]] = {}  # ``serving`` as last written to disk
        for leftover in path.parent.glob(".state-*"):  # a kill between the temporary file and the rename
            leftover.unlink(missing_ok=True)
        self._load()
        interrupted = [cid for cid, c in self.commands.items() if c.get("provisional")]
        for cid in interrupted:
            del self.commands[cid]
        if interrupted:
            _log.info("command(s) %s were interrupted in their health window; they run again", ", ".join(interrupted))

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
        self.durable = copy.deepcopy(self.serving)

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
            written = copy.deepcopy(self.serving)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".state-", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f, indent=1, sort_keys=True)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            _fsync_dir(self.path.parent)
            self.durable = written

    def record_command(
        self,
        command_id: str,
        ok: bool,
        message: str,
        model_ref: str,
        *,
        provisional: bool = False,
        last_good: bool = False,
    ) -> None:
        """Record a command's outcome; ``provisional``: the version serves, its health window is not over;
        ``last_good``: ``model_ref`` is this device's last-good now."""
        entry: dict[str, Any] = {"ok": ok, "message": message, "model_ref": model_ref, "at": time.time()}
        if provisional:
            entry["provisional"] = True
        if last_good:
            entry["last_good"] = True
        self.commands[command_id] = entry
        self.save()

    def finish_command(
        self, command_id: str, ok: bool | None = None, message: str = "", *, last_good: bool = False
    ) -> None:
        """A command's health window is over: its outcome is final (``ok`` None: keep the recorded one;
        ``last_good``: its version is this device's last-good now). The caller saves the state."""
        entry = self.commands.get(command_id)
        if entry is None:
            return
        entry.pop("provisional", None)
        if ok is not None:
            entry.update(ok=ok, message=message)
        if last_good:
            entry["last_good"] = True

    def last_good(self, pipeline: str) -> dict[str, str]:
        """The pipeline's last-good entry as it is on disk ({} before its first health window passed)."""
        return dict(self.durable.get(pipeline) or {})


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable: after a power cut the old file must not come back."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder; the rename is atomic all the same
        pass
    finally:
        os.close(fd)


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
