"""A JSON-lines log formatter for ELK/Loki: one object per record, credentials redacted.

Library code never installs handlers; the agent's CLI does, when asked for ``--log-format json``::

    handler = logging.StreamHandler()
    handler.setFormatter(JsonLinesFormatter(static={"device": "cam-1"}))
    logging.getLogger().addHandler(handler)
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from edgefleet.sdk import redact_uri

__all__ = ["JsonLinesFormatter"]

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonLinesFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", "thread", ...extra, "exc"}``; ``static`` fields go on every line."""

    def __init__(self, static: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._static = dict(static or {})

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact_uri(record.getMessage()),
            "thread": record.threadName,
        }
        out.update(self._static)
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
        if record.exc_info:
            out["exc"] = redact_uri(self.formatException(record.exc_info))
        return json.dumps(out, ensure_ascii=False, default=repr)
