"""The extension seam: one registry per kind of pipeline part.

Every part a pipeline is built from is an entry of its kind's registry::

    kind       base config       built-ins register in   third parties: entry-point group
    source     SourceConfig      _sources/__init__.py    edgefleet.sources
    backend    BackendConfig     _backends/__init__.py   edgefleet.backends
    decoder    DecoderConfig     _decoders/__init__.py   edgefleet.decoders
    sink       SinkConfig        _sinks/__init__.py      edgefleet.sinks
    analytics  AnalyticsConfig   _analytics/__init__.py  edgefleet.analytics

An entry is a key (the value of the config's ``type``), a strict pydantic config model subclassing the
kind's base with ``type: Literal["<key>"]``, a factory that builds the part from a validated config (and
a kind-specific context), and the pip extra that installs what the part needs. One config key selects
both the schema and the implementation: a config of a kind validates like a discriminated union on
``type``, and an error names the kind, the key and the field (``decoder (yolo): reg_max: ...``).

Installed distributions add entries through the entry-point groups above: each entry point names a
function that takes no arguments and registers its entry with ``edgefleet.sdk.register_<kind>``; its
name is the key it registers. They are loaded once, on the first lookup in the registry, by whoever
looks (``edgefleet run``, the agent, an application), so an installed plugin needs no code change
anywhere. A plugin whose import fails for a missing library drops out (logged at INFO); a config that
asks for it gets an error naming what to install (the entry point's extras,
``name = "pkg.mod:register [gpu]"``). A plugin that fails otherwise is logged as a warning and dropped.

A module that only validates a kind's configs, and that the kind's implementations import in turn (the
manifest names its decoder; decoders read manifests), finds the registry by kind through
:func:`registry` instead of importing the kind's package: the package registers itself when it is
imported, and :func:`registry` imports it on first use.
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, Literal, TypeVar, cast, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from ._errors import EdgefleetError
from ._validation import format_validation_error

__all__ = ["KINDS", "Entry", "PluginConfig", "Registry", "registry"]

_log = logging.getLogger(__name__)
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
# Each kind's registry: the package that registers its built-ins (imported by registry(kind) on first
# use) and the name it has there.
_REGISTRIES: dict[str, tuple[str, str]] = {
    "source": ("edgefleet.sdk._sources", "SOURCES"),
    "backend": ("edgefleet.sdk._backends", "BACKENDS"),
    "decoder": ("edgefleet.sdk._decoders", "DECODERS"),
    "sink": ("edgefleet.sdk._sinks", "SINKS"),
    "analytics": ("edgefleet.sdk._analytics", "ANALYTICS"),
}
KINDS = tuple(_REGISTRIES)


class PluginConfig(BaseModel):
    """Base of every kind's config: strict (unknown keys, NaN and infinity are errors), frozen, and
    ``type`` names the entry whose schema the other fields follow."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    type: str = Field(description="Which entry of this kind: selects the schema and the implementation")


C = TypeVar("C", bound=PluginConfig)


@dataclass(frozen=True)
class Entry(Generic[C]):
    """One registered part: ``factory(config, ...)`` builds it from a validated ``config``."""

    kind: str
    key: str
    config: type[C]
    factory: Callable[..., Any]
    extra: str | None = None
    origin: str = "built-in"
    options: Mapping[str, Any] = field(default_factory=dict)  # what the kind adds (a source's URI rule)
    adapter: TypeAdapter[dict[str, Any]] | None = field(default=None, compare=False, repr=False)

    def install_hint(self) -> str:
        """``pip install 'dist[extra]'`` for the entry's extra, or "" when it has none."""
        return _install_hint(self.extra, _dist_of(self.origin))


class Registry(Generic[C]):
    """The entries of one kind. Thread-safe; installed plugins load on the first lookup."""

    def __init__(self, kind: str, base: type[C], error: type[EdgefleetError], *, group: str) -> None:
        self.kind = kind
        self.base = base
        self.error = error
        self.group = group
        self._entries: dict[str, Entry[C]] = {}
        self._unavailable: dict[str, str] = {}
        self._lock = threading.RLock()
        self._plugins_loaded = False
        self._loading = threading.local()  # .origin: the entry point this thread is loading (what it registers)
        self.validator = PlainValidator(self.coerce)
        """Use as ``Annotated[SerializeAsAny[Base], registry.validator]`` on a pydantic field of this kind."""

    # --- registration ---------------------------------------------------------------------------------
    def register(
        self,
        key: str,
        config: type[C],
        factory: Callable[..., Any],
        *,
        extra: str | None = None,
        replace: bool = False,
        origin: str = "built-in",
        options: Mapping[str, Any] | None = None,
    ) -> Entry[C]:
        """Add an entry; a key taken already is an error unless ``replace``."""
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise self.error(f"{self.kind} name {key!r} must be 1-64 letters, digits, - or _ (not first)")
        if not isinstance(config, type) or not issubclass(config, self.base):
            raise self.error(f"{self.kind} {key!r}: config must be a subclass of {self.base.__name__}, got {config!r}")
        declared = config.model_fields["type"].annotation
        if get_origin(declared) is not Literal or get_args(declared) != (key,):
            raise self.error(f'{self.kind} {key!r}: {config.__name__}.type must be declared Literal["{key}"]')
        if not callable(factory):
            raise self.error(f"{self.kind} {key!r}: factory must be callable, got {factory!r}")
        entry = Entry(
            self.kind,
            key,
            config,
            factory,
            extra,
            getattr(self._loading, "origin", None) or origin,
            dict(options or {}),
            TypeAdapter(cast(Any, dict.__class_getitem__((str, config)))),  # dict[str, config]
        )
        with self._lock:
            old = self._entries.get(key)
            if old is not None and not replace:
                raise self.error(f"a {self.kind} named {key!r} is already registered ({old.origin}; pass replace=True)")
            self._entries[key] = entry
            self._unavailable.pop(key, None)
        return entry

    def unregister(self, key: str) -> None:
        """Remove an entry (tests; an application replacing a built-in uses ``replace=True``)."""
        with self._lock:
            self._entries.pop(key, None)

    # --- lookup ---------------------------------------------------------------------------------------
    def get(self, key: str) -> Entry[C] | None:
        self._load_plugins()
        with self._lock:
            return self._entries.get(key)

    def entry(self, key: str) -> Entry[C]:
        """The entry for ``key``; the kind's error names the known keys, or why a plugin dropped out."""
        found = self.get(key)
        if found is None:
            raise self.error(self.describe_missing(key))
        return found

    def keys(self) -> list[str]:
        self._load_plugins()
        with self._lock:
            return sorted(self._entries)

    def entries(self) -> list[Entry[C]]:
        self._load_plugins()
        with self._lock:
            return [self._entries[k] for k in sorted(self._entries)]

    def unavailable(self) -> dict[str, str]:
        """Plugins that dropped out: key -> why (with what to install)."""
        self._load_plugins()
        with self._lock:
            return dict(self._unavailable)

    def describe_missing(self, key: object) -> str:
        with self._lock:
            reason = self._unavailable.get(key) if isinstance(key, str) else None
            known = ", ".join(sorted(self._entries)) or "none"
        if reason is not None:
            return f"{self.kind} {key!r} is not available: {reason}"
        return f"unknown {self.kind} {key!r} (known: {known})"

    # --- validation and building ----------------------------------------------------------------------
    def validate(self, data: object, where: str) -> C:
        """A config of this kind from a mapping (or a config instance); the kind's error names ``where``,
        the key and the field."""
        try:
            return self.coerce(data)
        except PydanticCustomError as exc:
            raise self.error(f"{where}: {self.kind}: {exc.message()}") from None
        except ValidationError as exc:
            raise self.error(format_validation_error(exc, where, prefix=(self.kind,))) from None

    def coerce(self, value: object) -> C:
        """The pydantic validator of a field of this kind: dispatch on ``type``."""
        if isinstance(value, BaseModel):
            if not isinstance(value, self.base):
                raise _custom("plugin_kind", f"a {type(value).__name__} is not a {self.kind} config")
            entry = self.get(value.type)
            if entry is None:
                raise _custom("plugin_unknown", self.describe_missing(value.type))
            if not isinstance(value, entry.config):
                raise _custom(
                    "plugin_config",
                    f"{self.kind} {value.type!r} takes a {entry.config.__name__}, not a {type(value).__name__}",
                )
            return value
        if not isinstance(value, Mapping):
            raise _custom("plugin_mapping", f"must be a mapping with a type field, got {type(value).__name__}")
        key = value.get("type")
        if key is None:
            raise _custom("plugin_type", f"needs a type field (one of: {', '.join(self.keys()) or 'none'})")
        entry = self.get(key) if isinstance(key, str) else None
        if entry is None or entry.adapter is None:
            raise _custom("plugin_unknown", self.describe_missing(key))
        tag = f"({key})"  # in the error location: "sources.1 (network): url: ..."
        config: C = entry.adapter.validate_python({tag: dict(value)})[tag]
        return config

    def build(self, config: C, *context: Any) -> Any:
        """``factory(config, *context)`` of the entry ``config.type`` selects; a library the factory
        imports that is missing becomes the kind's error naming what to install."""
        entry = self.entry(config.type)
        try:
            return entry.factory(config, *context)
        except ModuleNotFoundError as exc:
            hint = entry.install_hint() or f"install {exc.name}"
            raise self.error(f"{self.kind} {entry.key!r} needs {exc.name}, which is not installed: {hint}") from exc

    # --- installed plugins ----------------------------------------------------------------------------
    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        with self._lock:
            if self._plugins_loaded:
                return
            self._plugins_loaded = True  # first: a plugin looking something up while it loads must not recurse
            for ep in _entry_points(self.group):
                self._load(ep)

    def _load(self, ep: EntryPoint) -> None:
        dist = getattr(getattr(ep, "dist", None), "name", None)
        origin = f"entry point {ep.name} = {ep.value}" + (f" of {dist}" if dist else "")
        if ep.name in self._entries:  # registered in-process first: that one wins
            _log.warning("a %s named %r is registered already; %s is not loaded", self.kind, ep.name, origin)
            return
        self._loading.origin = origin
        try:
            target = ep.load()
            if not callable(target):
                raise TypeError(f"{ep.value} is not a function (it must register the {self.kind})")
            target()
        except ModuleNotFoundError as exc:  # a library it needs is not installed (not a name it misspelt)
            hint = _install_hint(",".join(ep.extras) or None, dist) or f"install {exc.name or 'what it imports'}"
            # not a fault until a config asks for it (then this is its error): no warning on every start
            self._drop(ep.name, f"{origin} needs {exc.name or exc}, which is not installed: {hint}", logging.INFO)
            return
        except Exception as exc:  # a broken plugin must not take every pipeline down with it
            self._drop(ep.name, f"{origin} failed to load: {type(exc).__name__}: {exc}", logging.WARNING)
            return
        finally:
            self._loading.origin = None
        if ep.name not in self._entries:
            _log.warning("%s registered no %s named %r", origin, self.kind, ep.name)

    def _drop(self, key: str, reason: str, level: int) -> None:
        self._unavailable[key] = reason
        _log.log(level, "%s %r dropped out: %s", self.kind, key, reason)


def registry(kind: str) -> Registry[Any]:
    """The registry of ``kind`` (``source``, ``backend``, ``decoder``, ``sink`` or ``analytics``),
    importing the package that registers its built-ins on first use."""
    where = _REGISTRIES.get(kind)
    if where is None:
        raise KeyError(f"no kind {kind!r} (kinds: {', '.join(_REGISTRIES)})")
    found: Registry[Any] = getattr(importlib.import_module(where[0]), where[1])
    return found


def _entry_points(group: str) -> list[EntryPoint]:
    try:
        return sorted(entry_points(group=group), key=lambda ep: ep.name)
    except Exception:  # a broken installed distribution's metadata must not stop the pipeline
        _log.warning("cannot read the installed %s entry points", group, exc_info=True)
        return []


def _dist_of(origin: str) -> str | None:
    if origin == "built-in":
        return "edgefleet-sdk"
    _, sep, dist = origin.rpartition(" of ")
    return dist if sep else None


def _install_hint(extra: str | None, dist: str | None) -> str:
    if not extra:
        return ""
    if "[" in extra or dist is None:  # a whole requirement ("pkg[gpu]"), or no distribution to name
        return f"pip install '{extra}'"
    return f"pip install '{dist}[{extra}]'"


def _custom(kind: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(kind, message)  # no context: the message is taken as it is
