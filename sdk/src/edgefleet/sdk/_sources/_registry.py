"""The ``source`` kind's registry: entries also say which source strings are theirs, so a URI and a
config mapping go through the same entries (one table).

A string is matched against the entries' prefixes first (the longest that fits wins), then against
their predicates (an application's or plugin's before the built-ins, whose last, ``file``, takes any
path). The entry's ``parse`` turns it into config fields; the options in it are fields too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, get_args

from pydantic import ValidationError

from .._errors import SourceError
from .._redact import redact_uri
from .._registry import Entry, Registry
from ._base import Source, SourceConfig, SourceSpec
from ._configs import UriForm

__all__ = ["SOURCES", "SourceFactory", "SourceRegistry", "create_source", "parse_source", "register_source"]

_ID_RE = re.compile(r"^([A-Za-z0-9_.-]{1,64})=(.+)$", re.S)
_OPTION_TYPES = {"int_parsing": "an integer", "float_parsing": "a number", "bool_parsing": "true or false"}

SourceFactory = Callable[[Any, SourceSpec], Source]
"""``factory(config, spec) -> Source``: built, not opened (its runner opens it)."""


class SourceRegistry(Registry[SourceConfig]):
    """Source entries, with their URI forms (``options["uri"]``)."""

    def form_for(self, text: str) -> tuple[Entry[SourceConfig], UriForm]:
        """The entry a source string belongs to."""
        lowered = text.lower()
        best: tuple[int, Entry[SourceConfig], UriForm] | None = None
        predicates: list[tuple[bool, Entry[SourceConfig], UriForm]] = []
        for entry in self.entries():
            form = entry.options.get("uri")
            if not isinstance(form, UriForm):
                continue
            for prefix in form.prefixes:
                if lowered.startswith(prefix) and (best is None or len(prefix) > best[0]):
                    best = (len(prefix), entry, form)
            if form.match is not None:
                predicates.append((entry.origin == "built-in", entry, form))
        if best is not None:
            return best[1], best[2]
        # plugins' predicates first; the built-ins in the order they registered (file last: any path)
        for _, entry, form in sorted(predicates, key=lambda p: (p[0], p[1].options.get("order", 0))):
            if form.match is not None and form.match(text):
                return entry, form
        raise SourceError(f"{redact_uri(text)}: no source kind takes this (known: {', '.join(self.keys())})")

    def parse(self, text: str, index: int = 0) -> SourceSpec:
        """A user's source string -> its :class:`SourceSpec` (see :func:`parse_source`)."""
        text = text.strip()
        if not text:
            raise SourceError("empty source")
        stream_id = None
        m = _ID_RE.match(text)
        if m and " " not in m.group(1):
            stream_id, text = m.group(1), m.group(2)
        entry, form = self.form_for(text)
        fields = dict(form.parse(text))
        try:
            config = entry.config.model_validate({**fields, "type": entry.key, "id": stream_id or fields.get("id")})
        except ValidationError as exc:
            raise SourceError(_option_error(exc, entry, form, text)) from None
        return self.spec(config, index)

    def spec(self, config: SourceConfig, index: int) -> SourceSpec:
        """A validated config -> its spec: stream id ``s<index>`` unless it names one, live as its kind."""
        live = config.live if config.live is not None else type(config).live_default
        return SourceSpec(
            uri=config.uri(),
            kind=config.type,
            stream_id=config.id or f"s{index}",
            live=live,
            queue_size=config.queue,
            realtime=config.realtime,
            loop=config.loop,
            config=config,
        )


def _option_error(exc: ValidationError, entry: Entry[SourceConfig], form: UriForm, text: str) -> str:
    """Errors in a source string, in its own terms: options named as such, the URI redacted."""
    shown = redact_uri(text)
    known = sorted(set(entry.config.model_fields) - {"type", "id", *form.positional})
    parts = []
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else ""
        value = err.get("input")
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            parts.append(f"unknown option {name} for a {entry.key} source (known: {', '.join(known)})")
        elif kind in _OPTION_TYPES:
            parts.append(f"option {name} must be {_OPTION_TYPES[kind]}, got {value!r}")
        elif kind == "literal_error" and name in entry.config.model_fields:
            expected = ", ".join(str(v) for v in get_args(entry.config.model_fields[name].annotation))
            parts.append(f"{name} must be one of {expected}, got {value!r}")
        elif name in form.positional:
            parts.append(str(err["msg"]).removeprefix("Value error, "))
        else:
            parts.append(f"option {name}: {err['msg']}")
    return f"{shown}: " + "; ".join(parts)


SOURCES = SourceRegistry("source", SourceConfig, SourceError, group="edgefleet.sources")


def register_source(
    key: str,
    config: type[SourceConfig],
    factory: SourceFactory,
    *,
    extra: str | None = None,
    replace: bool = False,
    prefixes: Sequence[str] = (),
    match: Callable[[str], bool] | None = None,
    parse: Callable[[str], Mapping[str, Any]] | None = None,
) -> None:
    """Make a source kind available to pipelines as ``{type: <key>, ...}`` and, with ``prefixes`` or
    ``match``, as a source string.

    ``config``: its fields (a :class:`~edgefleet.sdk.SourceConfig` with ``type: Literal["<key>"]``; the
    base brings ``id``, ``queue``, ``live``, ``realtime``, ``loop``); ``factory(config, spec)`` builds the
    :class:`~edgefleet.sdk.Source` (not opened); ``extra``: the pip extra that installs what it needs.
    ``prefixes`` (e.g. ``("ramp:",)``) or ``match(text)`` claim source strings, and ``parse(text)``
    returns their config fields (strings are fine: the config converts them); options after ``?`` are
    fields too.

    Example::

        class RampConfig(SourceConfig):
            type: Literal["ramp"] = "ramp"
            frames: int = 100

        register_source(
            "ramp", RampConfig, lambda config, spec: RampSource(spec),
            prefixes=("ramp:",), parse=lambda text: dict(urllib.parse.parse_qsl(text.partition("?")[2])),
        )
    """
    if (prefixes or match is not None) and parse is None:
        raise SourceError(f"source {key!r}: prefixes or match need the parse function that reads the string")
    options: dict[str, Any] = {}
    if parse is not None:
        form = UriForm(parse, prefixes=tuple(prefixes), match=match)
        taken = {p: e.key for e in SOURCES.entries() if e.key != key for p in _prefixes(e)}
        clash = sorted(p for p in form.prefixes if p in taken)
        if clash:
            raise SourceError(f"source {key!r}: prefix {clash[0]!r} is taken by source {taken[clash[0]]!r}")
        options["uri"] = form
    SOURCES.register(key, config, factory, extra=extra, replace=replace, origin="register_source", options=options)


def _prefixes(entry: Entry[SourceConfig]) -> tuple[str, ...]:
    form = entry.options.get("uri")
    return form.prefixes if isinstance(form, UriForm) else ()


def parse_source(text: str, index: int = 0) -> SourceSpec:
    """Turn a user's source string into a :class:`SourceSpec`.

    Forms (an optional ``name=`` prefix sets the stream id; the default is ``s<index>``)::

        clip.mp4 | file:clip.mp4          video file (never drops; ?realtime=1 paces it, ?loop=1 repeats)
        ./frames/                         folder of images, in name order
        rtsp://user:pass@host/path        RTSP camera (live: reconnects, drops the oldest under pressure)
        http(s)://host/stream.mjpg        network stream (live)
        /dev/video0 | usb:0               USB/V4L2 camera (?width=&height=&fps=)
        gst:<pipeline>                    GStreamer pipeline string (or any string with " ! ")
        nvdec:clip.mp4                    video file decoded on the GPU (NVDEC; ?gpu=N&matrix=bt709&prefetch=N)
        synthetic: | synthetic:?width=1280&height=720&fps=30&frames=300   test pattern

    and whatever installed plugins add. Options common to all: ``queue`` (frames buffered per stream,
    default 4), ``live``, ``realtime``, ``loop`` (after ``#`` on network URLs).
    """
    return SOURCES.parse(text, index)


def create_source(spec: SourceSpec) -> Source:
    """Build (not open) the source for a spec."""
    if spec.config is None:
        raise SourceError(f"{redact_uri(spec.uri)}: a spec without a config has no source kind to build")
    source = SOURCES.build(spec.config, spec)
    if not isinstance(source, Source):
        raise SourceError(f"source {spec.kind!r}: its factory returned a {type(source).__name__}, not a Source")
    return source
