"""Credential redaction for URIs that reach logs, errors, metrics and telemetry."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["redact", "redact_uri"]

_SECRET_KEYS = {"password", "passwd", "pass", "pwd", "token", "access_token", "key", "secret", "auth", "sig"}
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/@:\s]*):[^/@\s]*@")


def redact_uri(uri: str) -> str:
    """Replace the password of a URI's userinfo and secret-looking query values with ``***``.

    >>> redact_uri("rtsp://admin:hunter2@10.0.0.5:554/live?token=abc&ch=1")
    'rtsp://admin:***@10.0.0.5:554/live?token=***&ch=1'
    """
    try:
        parts = urlsplit(uri)
    except ValueError:
        return redact(uri)
    if not parts.scheme or not parts.netloc:
        return redact(uri)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k.lower() in _SECRET_KEYS else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact(text: str) -> str:
    """Redact every ``scheme://user:password@`` occurrence inside free text (error messages, logs)."""
    return _USERINFO.sub(r"\g<scheme>\g<user>:***@", text)
