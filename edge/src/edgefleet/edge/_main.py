"""The agent's composition root: config → agent → pipelines → connection, torn down in reverse."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from edgefleet.sdk.kit import set_log_fields

from ._agent import Agent
from ._config import AgentConfig, load_agent_config
from ._errors import AgentError
from ._telemetry import TelemetryError

__all__ = ["run_agent"]

_log = logging.getLogger(__name__)


def run_agent(config_path: Path) -> None:
    """Run until SIGINT/SIGTERM (blocking)."""
    config = load_agent_config(config_path)
    set_log_fields(device=config.device_id)  # on every log line (when the command line installed the filter)
    with _state_dir_lock(config.state_dir):
        _run(config)


@contextlib.contextmanager
def _state_dir_lock(state_dir: Path) -> Iterator[None]:
    """One agent per state_dir: two would share the model store and state.json, and the controller would
    flip the device's stream between them every few seconds while both executed its commands."""
    import fcntl

    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        f = (state_dir / "agent.lock").open("a+", encoding="utf-8")
    except OSError as exc:
        raise AgentError(f"state_dir {state_dir}: {exc.strerror}") from None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            other = f.read().strip() or "?"
            raise AgentError(
                f"state_dir {state_dir} is in use by another agent (pid {other}); give each agent its own"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield  # the lock goes with the file, closed here or by the kernel if the process dies


def _run(config: AgentConfig) -> None:
    agent = Agent(config)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        with contextlib.ExitStack() as stack:  # shutdown mirrors start-up
            if agent.telemetry is not None:
                # first up, last down: pipeline and swap events are spooled, the OFFLINE status goes last
                try:
                    agent.telemetry.start()
                except (TelemetryError, OSError) as exc:
                    raise AgentError(f"telemetry: {exc}") from None
                stack.callback(agent.telemetry.stop)
            stack.callback(agent.close_pipelines)  # also undoes a partial start
            await asyncio.to_thread(agent.start_pipelines)
            _log.info("agent %s running %d pipeline(s)", config.device_id, len(agent.hosts))
            await agent.run(stop)

    asyncio.run(main())
