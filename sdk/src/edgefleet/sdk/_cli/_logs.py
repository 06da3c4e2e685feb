"""Log output of the long-running commands (``edgefleet agent``, ``edgefleet controller serve``): text with
UTC timestamps, or JSON lines (ELK, Loki); every line carries the fields of :func:`set_log_fields` (the device id)
and of its thread (pipeline, stream: :func:`edgefleet.sdk._log_context.bind`); credentials are redacted in
the message and the traceback.

    2026-12-02T03:04:05.678Z WARNING [device=cam-1 pipeline=cam stream=door] edgefleet.sdk._sources._runner: …
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from .._log_context import current
from .._redact import redact_uri

__all__ = ["LOG_FORMATS", "ContextFilter", "JsonLinesFormatter", "TextFormatter", "configure_logs", "set_log_fields"]

LOG_FORMATS = ("text", "json")
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_CONTEXT = ("device", "pipeline", "stream")
_static: dict[str, Any] = {}


def set_log_fields(**fields: Any) -> None:
    """Fields on every line from now on (``device="cam-1"``)."""
    _static.update({k: v for k, v in fields.items() if v not in (None, "")})


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class ContextFilter(logging.Filter):
    """Puts the static fields and the thread's pipeline/stream on each record (never overriding ``extra``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (*_static.items(), *current().items()):
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class TextFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> [device=… pipeline=… stream=…] <logger>: <message>``, credentials redacted."""

    def format(self, record: logging.LogRecord) -> str:
        ctx = " ".join(f"{k}={getattr(record, k)}" for k in _CONTEXT if getattr(record, k, None))
        head = f"{_timestamp(record)} {record.levelname}" + (f" [{ctx}]" if ctx else "")
        text = f"{head} {record.name}: {redact_uri(record.getMessage())}"
        if record.exc_info:
            text += "\n" + redact_uri(self.formatException(record.exc_info))
        return text


class JsonLinesFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", "thread", ...extra, "exc"}``; ``static`` fields go on every line."""

    def __init__(self, static: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._static = dict(static or {})

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact_uri(record.getMessage()),
            "thread": record.threadName,
        }
        out.update(self._static)
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                plain = isinstance(value, (str, int, float, bool, type(None)))
                out[key] = redact_uri(value) if isinstance(value, str) else (value if plain else repr(value))
        if record.exc_info:
            out["exc"] = redact_uri(self.formatException(record.exc_info))
        return json.dumps(out, ensure_ascii=False, default=repr)


def configure_logs(log_format: str, *, service: str, **fields: Any) -> None:
    """Install the formatter (``text`` or ``json``) and the context filter on the root handlers (one on
    stderr when there is none). An unknown format is the user's mistake: one line, exit 1."""
    from ._app import fail

    if log_format not in LOG_FORMATS:
        raise fail(f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}", 1)
    set_log_fields(**fields)
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    formatter = JsonLinesFormatter(static={"service": service}) if log_format == "json" else TextFormatter()
    for handler in root.handlers:
        handler.setFormatter(formatter)
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
