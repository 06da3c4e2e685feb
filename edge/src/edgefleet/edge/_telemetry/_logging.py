"""A JSON-lines log formatter for ELK/Loki: one object per record, credentials redacted. The SDK's, shared
with the controller (``edgefleet.sdk.kit.JsonLinesFormatter``); kept here under its old name.

Library code never installs handlers; the agent's CLI does, when asked for ``--log-format json``::

    handler = logging.StreamHandler()
    handler.setFormatter(JsonLinesFormatter(static={"device": "cam-1"}))
    logging.getLogger().addHandler(handler)
"""

from __future__ import annotations

from edgefleet.sdk.kit import JsonLinesFormatter

__all__ = ["JsonLinesFormatter"]
