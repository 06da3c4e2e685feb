"""Where file sinks write, checked against what the run reads before any sink opens."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .._errors import ConfigError
from .._sources import SourceSpec
from ._base import Sink
from ._files import VideoSink

__all__ = ["Read", "check_sink_paths", "pipeline_reads"]

# (path, what it is, whether writing inside it harms it: a file in a model package breaks its file list;
# a results file in a folder of images is not an image and is never read)
Read = tuple[Path, str, bool]


def pipeline_reads(specs: Sequence[SourceSpec], model_root: Path) -> list[Read]:
    """What a pipeline reads from disk: the files and folders its sources read (``SourceConfig.reads``)
    and its model package."""
    reads: list[Read] = [
        (path, f"source {s.stream_id}", False) for s in specs if s.config is not None and (path := s.config.reads())
    ]
    reads.append((model_root, "the model package", True))
    return reads


def check_sink_paths(sinks: Sequence[Sink], reads: Sequence[Read], stream_ids: Sequence[str]) -> None:
    """Refuse a sink that would write over something in ``reads`` or over another sink's file (a JsonlSink
    onto the clip truncated it; a VideoSink onto it replaced it with its first frames)."""
    resolved = [(p.expanduser().resolve(), what, inside) for p, what, inside in reads]
    written: dict[Path, Path] = {}
    for sink in sinks:
        path = getattr(sink, "path", None)
        if not isinstance(path, Path):
            continue
        targets = [path]
        if isinstance(sink, VideoSink) and sink.multi_stream:
            targets += [sink.path_for(s) for s in stream_ids]
        for target in {t.expanduser().resolve() for t in targets}:
            for src, what, inside in resolved:
                if target == src or (inside and src in target.parents):
                    raise ConfigError(f"sink {path} would write over {what} ({src}); write it somewhere else")
            if target in written:
                raise ConfigError(f"two sinks write the same file ({written[target]} and {path})")
            written[target] = path
