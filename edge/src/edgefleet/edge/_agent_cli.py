"""``edgefleet agent --config agent.yaml``: run the edge agent until SIGINT/SIGTERM."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["register"]


def register(cli: Any) -> None:
    app: typer.Typer = cli.app

    @app.command("agent", no_args_is_help=True)
    def agent(
        config: Annotated[Path, typer.Option("--config", "-c", help="agent.yaml")],
        log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING")] = "INFO",
        log_format: Annotated[
            str,
            typer.Option(help="text, or json: one JSON object per line (ELK, Loki), credentials redacted"),
        ] = "text",
    ) -> None:
        """Run the edge agent: the configured pipelines, following the controller."""
        from edgefleet.sdk import EdgefleetError
        from edgefleet.sdk.kit import configure_logs, fail, set_log_level

        from ._main import run_agent

        configure_logs(log_format, service="edgefleet-agent")  # the device id joins once the config is read
        set_log_level(log_level)
        try:
            run_agent(config)
        except EdgefleetError as exc:  # AgentError and the SDK's errors alike
            raise fail(str(exc), 1) from None
