"""The agent's composition root: config → agent → pipelines → connection, torn down in reverse."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

from ._agent import Agent
from ._config import load_agent_config
from ._errors import AgentError
from ._telemetry import TelemetryError

__all__ = ["run_agent"]

_log = logging.getLogger(__name__)


def run_agent(config_path: Path) -> None:
    """Run until SIGINT/SIGTERM (blocking)."""
    config = load_agent_config(config_path)
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
