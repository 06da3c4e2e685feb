"""``edgefleet run``: one pipeline from flags or a YAML config, with progress and a summary."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from .._config import PipelineConfig, load_pipeline_config
from .._errors import ConfigError
from .._pipeline import Pipeline
from .._results import Result
from .._sinks import JsonlSink, Sink, VideoSink
from .._sinks._paths import check_sink_paths
from .._source_watch import SourceTimeout, waiting_streams
from ._display import live_table, summary_tables

__all__ = ["DEFAULT_SOURCE_TIMEOUT_S", "run_command"]

#: ``run --source-timeout``: an RTSP camera opens within its 5 s open timeout; a few retries with backoff fit
DEFAULT_SOURCE_TIMEOUT_S = 30.0


def _config_from_flags(
    model: Path | None,
    sources: list[str],
    batch: int,
    device: str,
    backend: str,
    max_frames: int | None,
    score: float | None,
    source_timeout: float,
) -> PipelineConfig:
    if model is None:
        raise ConfigError("--model is required (or give --config)")
    if not sources:
        raise ConfigError("at least one --source is required (or give --config)")
    try:
        return PipelineConfig(
            model=model,
            sources=tuple(sources),
            max_batch=batch,
            device=device,
            backend={"type": backend},  # any installed backend: the registry validates it
            max_frames=max_frames,
            score_threshold=score,
            source_timeout_s=source_timeout,
        )
    except Exception as exc:  # pydantic ValidationError: name the flag
        from pydantic import ValidationError

        from .._validation import format_validation_error

        if isinstance(exc, ValidationError):
            raise ConfigError(format_validation_error(exc, "arguments")) from None
        raise


def run_command(
    *,
    model: Path | None,
    sources: list[str],
    out: Path | None,
    jsonl: Path | None,
    batch: int,
    device: str,
    backend: str,
    config: Path | None,
    max_frames: int | None,
    score: float | None,
    as_json: bool,
    quiet: bool,
    source_timeout: float | None = None,
) -> None:
    if config is not None:
        given = [
            flag
            for flag, on in (
                ("--model", model is not None),
                ("--source", bool(sources)),
                ("--batch", batch != 1),
                ("--device", device != "cpu"),
                ("--backend", backend != "onnxruntime"),
                ("--max-frames", max_frames is not None),
                ("--score", score is not None),
            )
            if on
        ]
        if given:  # they used to be ignored without a word
            raise ConfigError(f"--config takes the place of {', '.join(given)}: set them in {config}, or drop --config")
        cfg = load_pipeline_config(config)
        if source_timeout is not None:
            cfg = cfg.model_copy(update={"source_timeout_s": source_timeout})
    else:
        timeout = DEFAULT_SOURCE_TIMEOUT_S if source_timeout is None else source_timeout
        cfg = _config_from_flags(model, sources, batch, device, backend, max_frames, score, timeout)
    console = Console(stderr=True, quiet=quiet or as_json)
    sinks: list[Sink] = []
    video: VideoSink | None = None
    if jsonl is not None:
        sinks.append(JsonlSink(jsonl))
    if out is not None:
        video = VideoSink(out, multi_stream=len(cfg.sources) > 1)
        sinks.append(video)
    if config is not None:  # sources, the model and sink-on-sink are checked by Pipeline.start
        check_sink_paths(sinks, [(config, "the config", False)], ())
    counter = {"n": 0}

    def on_result(_: Result) -> None:
        counter["n"] += 1

    pipeline = Pipeline.from_config(cfg, on_result=on_result, sinks=sinks)
    with console.status(f"loading {cfg.model} ..."):
        pipeline.start()
    interrupts = {"n": 0}

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        interrupts["n"] += 1
        if interrupts["n"] == 1:
            console.print("[yellow]stopping: finishing frames in flight (Ctrl-C again to abort)[/]")
            pipeline.stop()
        else:
            pipeline.abort()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        _watch(pipeline, console, counter)
    finally:
        signal.signal(signal.SIGINT, previous)
        pipeline.close()
    stats = pipeline.stats()
    if pipeline.error is not None:
        pipeline.wait(0)  # raises PipelineError with the cause
    if interrupts["n"] and stats.frames_in == 0 and any(s.live for s in pipeline.specs):
        # stopped by hand before any camera delivered: not a run that is "done"
        raise SourceTimeout("stopped before any source delivered a frame: " + waiting_streams(stats))
    if as_json:
        data: dict[str, Any] = stats.to_dict()
        data["outputs"] = {
            "jsonl": str(jsonl) if jsonl else None,
            "video": {k: str(v) for k, v in video.paths.items()} if video else None,
        }
        print(json.dumps(data, indent=2, default=str))
        return
    for table in summary_tables(stats):
        console.print(table)
    if jsonl:
        console.print(f"detections: {jsonl}")
    if video is not None:
        for path in video.paths.values():
            console.print(f"annotated video: {path}")


def _watch(pipeline: Pipeline, console: Console, counter: dict[str, int]) -> None:
    limit = pipeline.config.max_frames
    if not any(s.live for s in pipeline.specs):
        progress = Progress(
            TextColumn("[bold]processing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[fps]} fps"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        with progress:
            task = progress.add_task("frames", total=None, fps="0.0")
            while not pipeline.wait(0.25):
                counts = pipeline.source_frame_counts()
                if all(c is not None for c in counts.values()):
                    total = sum(min(c or 0, limit) if limit else (c or 0) for c in counts.values())
                    progress.update(task, total=total)
                progress.update(task, completed=counter["n"], fps=f"{pipeline.stats().fps:.1f}")
            progress.update(task, completed=counter["n"])
        return
    try:
        with Live(live_table(pipeline.stats()), console=console, refresh_per_second=2, transient=False) as live:
            try:
                while not pipeline.wait(0.5):  # raises when a stage failed
                    live.update(live_table(pipeline.stats()))
            finally:
                live.update(live_table(pipeline.stats()))  # the last state, a failed stream included
    finally:
        if not console.is_terminal:
            console.line()  # a non-terminal render ends without one; an error line would join the table
