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
        import logging

        from edgefleet.sdk import EdgefleetError
        from edgefleet.sdk._cli import fail, set_log_level

        from ._errors import AgentError
        from ._main import run_agent

        if log_format not in ("text", "json"):
            raise typer.BadParameter("must be text or json", param_hint="--log-format")
        if log_format == "json":
            from ._telemetry._logging import JsonLinesFormatter

            root = logging.getLogger()
            if not root.handlers:
                root.addHandler(logging.StreamHandler())
            for handler in root.handlers:
                handler.setFormatter(JsonLinesFormatter(static={"service": "edgefleet-agent"}))
        set_log_level(log_level)
        try:
            run_agent(config)
        except (AgentError, EdgefleetError) as exc:
            raise fail(str(exc), 1) from None
