"""Commands the SDK contributes: ``run``, ``bench``, ``plugins`` and ``models
inspect|init|bump|pack|verify|quantize``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._app import Cli

__all__ = ["register"]


def register(cli: Cli) -> None:
    app = cli.app

    @app.command("run", no_args_is_help=True)
    def run(
        model: Annotated[Path | None, typer.Option("--model", "-m", help="Model package folder or tar")] = None,
        source: Annotated[
            list[str] | None,
            typer.Option(
                "--source",
                "-s",
                help="Video file, image folder, rtsp://..., /dev/videoN, gst:<pipeline>, "
                "synthetic:; repeat for several streams; prefix name= to name a stream",
            ),
        ] = None,
        out: Annotated[Path | None, typer.Option(help="Annotated H.264 MP4 (one per stream if several)")] = None,
        jsonl: Annotated[Path | None, typer.Option(help="Write every result as a JSON line here")] = None,
        batch: Annotated[int, typer.Option(min=1, help="Largest batch across streams")] = 1,
        device: Annotated[str, typer.Option(help="cpu or cuda:N")] = "cpu",
        backend: Annotated[
            str, typer.Option(help="onnxruntime, tensorrt, or an installed plugin's backend")
        ] = "onnxruntime",
        config: Annotated[Path | None, typer.Option(help="Pipeline YAML instead of the flags above")] = None,
        max_frames: Annotated[int | None, typer.Option(help="Stop each stream after N frames")] = None,
        score: Annotated[float | None, typer.Option(help="Score threshold (overrides the manifest)")] = None,
        source_timeout: Annotated[
            float | None,
            typer.Option(
                min=0,
                help="Exit non-zero when no source has delivered a frame after this many seconds "
                "(default 30; 0 waits for ever; with --config: the config's source_timeout_s)",
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the final stats as JSON on stdout")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress or tables")] = False,
    ) -> None:
        """Run a model over one or more sources."""
        from ._run import run_command

        run_command(
            model=model,
            sources=source or [],
            out=out,
            jsonl=jsonl,
            batch=batch,
            device=device,
            backend=backend,
            config=config,
            max_frames=max_frames,
            score=score,
            source_timeout=source_timeout,
            as_json=as_json,
            quiet=quiet,
        )

    @app.command("bench")
    def bench(
        model: Annotated[Path, typer.Option("--model", "-m", help="Model package")] = Path("models/nanodet-m"),
        source: Annotated[Path, typer.Option("--source", "-s", help="Video file")] = Path("models/media/vtest-300.mp4"),
        frames: Annotated[int, typer.Option(min=1, help="Frames per measurement")] = 200,
        batch: Annotated[int, typer.Option(min=1, help="Batch size for the pipeline and the raw backend")] = 1,
        streams: Annotated[int, typer.Option(min=1, help="Copies of the source run side by side by the pipeline")] = 1,
        device: Annotated[str, typer.Option(help="cpu or cuda:N")] = "cpu",
        as_json: Annotated[bool, typer.Option("--json", help="JSON only")] = False,
        out: Annotated[Path | None, typer.Option(help="Also write the JSON here")] = None,
        compare: Annotated[
            Path | None, typer.Option(help="Another version of the model (e.g. its INT8 one) measured in the same run")
        ] = None,
    ) -> None:
        """Measure raw backend, naive loop and pipeline throughput side by side (prints JSON)."""
        from .._bench import run_bench

        run_bench(
            model=model,
            source=source,
            frames=frames,
            batch=batch,
            streams=streams,
            device=device,
            as_json=as_json,
            out=out,
            compare=compare,
        )

    @app.command("plugins")
    def plugins(
        as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
    ) -> None:
        """List every kind's entries (sources, backends, decoders, sinks, analytics): where each comes
        from, the extra it needs, and the installed plugins that dropped out and why."""
        from ._plugins import plugins_command

        plugins_command(as_json=as_json)

    models = cli.group("models", "Model packages: inspect locally; push/ls with a controller.")

    @models.command("inspect", no_args_is_help=True)
    def inspect(
        package: Annotated[Path, typer.Argument(help="Model package folder or tar")],
        as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
        load: Annotated[bool, typer.Option(help="Also load the model and check its real tensors")] = True,
    ) -> None:
        """Show a package's manifest, verify every file, and check the model against the manifest."""
        from ._inspect import inspect_command

        inspect_command(package, as_json=as_json, load=load)

    from ._models import register_model_commands

    register_model_commands(cli)
