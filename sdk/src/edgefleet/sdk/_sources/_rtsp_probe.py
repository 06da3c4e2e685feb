"""Why an RTSP stream did not open, asked of the server itself: one ``DESCRIBE`` (with the URL's credentials,
Basic or Digest as the server asks) tells a wrong password (401) from a wrong path (404). FFmpeg knows too,
but says so only in its own log, which is kept silent because it prints the URL with its password."""

from __future__ import annotations

import hashlib
import re
import socket
from base64 import b64encode
from urllib.parse import unquote, urlsplit, urlunsplit

from .._health import HealthReason

__all__ = ["describe_status", "rtsp_reason"]

_STATUS = re.compile(rb"^RTSP/1\.0 (\d{3})")
_CHALLENGE = re.compile(r'(\w+)="?([^",]*)"?')


def _request(sock: socket.socket, url: str, cseq: int, auth: str | None) -> tuple[int, dict[str, str]]:
    lines = [f"DESCRIBE {url} RTSP/1.0", f"CSeq: {cseq}", "Accept: application/sdp", "User-Agent: edgefleet"]
    if auth:
        lines.append(f"Authorization: {auth}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head = data.split(b"\r\n\r\n", 1)[0]
    m = _STATUS.match(head)
    if m is None:
        raise OSError("not an RTSP answer")
    headers: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers.setdefault(name.strip().lower(), value.strip())
    # the body (an SDP on 200) is not needed; the connection is closed after the answer
    return int(m.group(1)), headers


def _digest(challenge: str, user: str, password: str, url: str) -> str:
    fields = dict(_CHALLENGE.findall(challenge))
    realm, nonce = fields.get("realm", ""), fields.get("nonce", "")
    ha1 = hashlib.md5(f"{user}:{realm}:{password}".encode()).hexdigest()  # noqa: S324 - RTSP Digest is MD5
    ha2 = hashlib.md5(f"DESCRIBE:{url}".encode()).hexdigest()  # noqa: S324
    response = hashlib.md5(f"{ha1}:{nonce}:{ha2}".encode()).hexdigest()  # noqa: S324
    return f'Digest username="{user}", realm="{realm}", nonce="{nonce}", uri="{url}", response="{response}"'


NO_ANSWER = 0  # describe_status: the server took the connection but said nothing in time


def describe_status(url: str, timeout_s: float = 2.0) -> int | None:
    """The status code of ``DESCRIBE url`` (credentials from the URL, answering a Basic or Digest
    challenge once); :data:`NO_ANSWER` when the server accepted the connection and said nothing within
    ``timeout_s``; None when it cannot be asked (refused, not RTSP, rtsps://)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "rtsp" or not parts.hostname:
        return None
    try:
        port = parts.port or 554
    except ValueError:
        return None
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password or "")
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    bare = urlunsplit((parts.scheme, f"{netloc}:{port}", parts.path or "/", parts.query, ""))
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s) as sock:
            auth = f"Basic {b64encode(f'{user}:{password}'.encode()).decode()}" if user is not None else None
            status, headers = _request(sock, bare, 1, auth)
            challenge = headers.get("www-authenticate", "")
            if status == 401 and user is not None and challenge.lower().startswith("digest"):
                status, _ = _request(sock, bare, 2, _digest(challenge, user, password, bare))
            return status
    except TimeoutError:
        return NO_ANSWER
    except (OSError, UnicodeError):
        return None


_FIXED = {
    NO_ANSWER: (HealthReason.TIMEOUT, "the camera takes the connection but does not answer RTSP in time"),
    404: (HealthReason.NOT_FOUND, "the camera has no stream at this path (RTSP 404)"),
}


def rtsp_reason(status: int | None, *, credentials: bool = True) -> tuple[HealthReason, str] | None:
    """The reason and the words for a ``DESCRIBE`` status; None when it says nothing (not asked).
    ``credentials``: whether the URL carried any."""
    if status is None:
        return None
    if status in _FIXED:
        return _FIXED[status]
    if status in (401, 403):
        if not credentials:
            return HealthReason.UNAUTHORIZED, f"the camera needs credentials: rtsp://user:password@... (RTSP {status})"
        return HealthReason.UNAUTHORIZED, f"the camera refuses the credentials (RTSP {status})"
    if 200 <= status < 300:
        return HealthReason.DECODE_ERROR, "the camera answers, but no decodable video came (codec?)"
    return HealthReason.UNREACHABLE, f"the camera answers RTSP {status}"
