"""The client TLS context the agent and the controller use for MQTT (edge and cloud each keep their own
broker address type, but build the context here)."""

from __future__ import annotations

import ssl
from pathlib import Path

__all__ = ["client_context"]


def client_context(ca_file: Path | None, cert_file: Path | None, key_file: Path | None) -> ssl.SSLContext:
    """Server verified against ``ca_file`` (or the system store); ``cert_file``/``key_file``: the client's
    certificate. Raises ssl.SSLError or OSError for a file that is not usable."""
    ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    if cert_file is not None:
        ctx.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
    return ctx
