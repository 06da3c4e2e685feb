"""Who may call what: TLS server credentials and a server interceptor that authorizes every RPC.

With TLS the peer certificate is verified by gRPC against the client CA; this layer then reads its
role and name (see ``_certs``), refuses revoked serials (the CRL file is re-read when it changes, no
restart needed), and applies the policy:

* ``AgentService``: devices only; the device id is the certificate's, whatever the Hello claims;
* ``FleetService``: an admin certificate, or an admin token (``authorization: Bearer <token>``);
* health: anyone who got through the handshake.

Without TLS (``--insecure``) there are no identities: AgentService is open, FleetService needs a token
when one is configured.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from ._certs import CertError, Identity, identity_of, load_crl_serials

__all__ = ["Authorizer", "TLSFiles", "current_peer", "server_credentials"]

_log = logging.getLogger(__name__)
AGENT_PREFIX = "/edgefleet.proto.v1.AgentService/"
FLEET_PREFIX = "/edgefleet.proto.v1.FleetService/"
current_peer: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("peer", default=None)


@dataclass(frozen=True)
class TLSFiles:
    """The controller's certificate and key, the CA its clients' certificates must chain to, and the
    optional revocation list."""

    cert: Path
    key: Path
    client_ca: Path
    crl: Path | None = None


def server_credentials(tls: TLSFiles) -> grpc.ServerCredentials:
    try:
        pair = (tls.key.read_bytes(), tls.cert.read_bytes())
        ca = tls.client_ca.read_bytes()
    except OSError as exc:
        raise CertError(f"cannot read TLS file {exc.filename}: {exc.strerror}") from None
    return grpc.ssl_server_credentials([pair], root_certificates=ca, require_client_auth=True)


class _DeniedError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class Authorizer(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, tls: TLSFiles | None, admin_tokens: tuple[str, ...] = ()) -> None:
        self.tls = tls
        self._token_digests = [hashlib.sha256(t.encode()).digest() for t in admin_tokens if t]
        self._crl_mtime: int | None = None
        self._revoked: frozenset[int] = frozenset()
        self._ca_pem = tls.client_ca.read_bytes() if tls is not None else None
        if tls is not None and tls.crl is not None:
            self._reload_crl()

    def _reload_crl(self) -> None:
        crl = self.tls.crl if self.tls is not None else None
        if crl is None:
            return
        try:
            mtime = crl.stat().st_mtime_ns
        except OSError as exc:
            raise CertError(f"{crl}: cannot read the revocation list: {exc.strerror}") from None
        if mtime != self._crl_mtime:
            self._revoked = load_crl_serials(crl, self._ca_pem)
            self._crl_mtime = mtime
            _log.info("revocation list %s: %d revoked certificate(s)", crl, len(self._revoked))

    def _token_ok(self, context: grpc.aio.ServicerContext[Any, Any]) -> bool:
        if not self._token_digests:
            return False
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                digest = hashlib.sha256(value[7:].encode()).digest()
                return any(hmac.compare_digest(digest, d) for d in self._token_digests)
        return False

    def _peer(self, context: grpc.aio.ServicerContext[Any, Any]) -> Identity | None:
        if self.tls is None:
            return None
        pems = list(context.auth_context().get("x509_pem_cert") or [])
        if not pems:
            raise _DeniedError(grpc.StatusCode.UNAUTHENTICATED, "a client certificate is required")
        ident = identity_of(pems[0])
        if self.tls.crl is not None:
            try:
                self._reload_crl()
            except CertError as exc:  # fail closed: an unreadable CRL refuses everyone
                _log.error("%s", exc)
                raise _DeniedError(grpc.StatusCode.UNAVAILABLE, "the revocation list cannot be read") from None
        if ident.serial in self._revoked:
            _log.warning("refused revoked certificate %x (%s %s)", ident.serial, ident.role, ident.name)
            raise _DeniedError(grpc.StatusCode.UNAUTHENTICATED, f"certificate {ident.serial:x} is revoked")
        return ident

    def authorize(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> Identity | None:
        """The caller's identity, or raise _DeniedError."""
        peer = self._peer(context)
        if method.startswith(AGENT_PREFIX):
            if peer is not None and peer.role != "device":
                raise _DeniedError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"AgentService is for device certificates; this one is a {peer.role or 'role-less'} one",
                )
        elif method.startswith(FLEET_PREFIX):
            if peer is not None and peer.role == "admin":
                return peer
            if self._token_ok(context):
                return peer
            if peer is None and not self._token_digests:
                return None  # --insecure without a token: open (the CLI warned)
            who = f"a {peer.role} certificate ({peer.name})" if peer is not None else "no credentials"
            raise _DeniedError(
                grpc.StatusCode.PERMISSION_DENIED if peer is not None else grpc.StatusCode.UNAUTHENTICATED,
                f"FleetService needs an admin certificate or the admin token; the caller has {who}",
            )
        return peer

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return _wrap(handler, handler_call_details.method, self)


def _wrap(handler: grpc.RpcMethodHandler[Any, Any], method: str, auth: Authorizer) -> grpc.RpcMethodHandler[Any, Any]:
    async def check(context: grpc.aio.ServicerContext[Any, Any]) -> None:
        try:
            current_peer.set(auth.authorize(method, context))
        except _DeniedError as d:
            await context.abort(d.code, d.message)

    kinds = (
        ("unary_unary", grpc.unary_unary_rpc_method_handler),
        ("unary_stream", grpc.unary_stream_rpc_method_handler),
        ("stream_unary", grpc.stream_unary_rpc_method_handler),
        ("stream_stream", grpc.stream_stream_rpc_method_handler),
    )
    deserialize = handler.request_deserializer

    def tolerant(raw: bytes) -> Any:
        """Bytes that are not the method's message become _MALFORMED, answered INVALID_ARGUMENT below:
        gRPC would otherwise log a traceback per request and answer UNKNOWN."""
        try:
            return deserialize(raw) if deserialize is not None else raw
        except DecodeError:
            return _MALFORMED

    async def refuse(context: Any) -> None:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: the request is not a valid message")

    def screened(requests: Any, context: Any) -> Any:
        async def each() -> Any:
            async for item in requests:
                if item is _MALFORMED:
                    await refuse(context)
                yield item

        return each()

    for attr, make in kinds:
        inner = getattr(handler, attr)
        if inner is None:
            continue
        streamed = attr.startswith("stream_")
        if inspect.isasyncgenfunction(inner):

            async def gen(request: Any, context: Any, _inner: Any = inner, _streamed: bool = streamed) -> Any:
                await check(context)
                if not _streamed and request is _MALFORMED:
                    await refuse(context)
                async for item in _inner(screened(request, context) if _streamed else request, context):
                    yield item

            behavior: Any = gen
        else:

            async def call(request: Any, context: Any, _inner: Any = inner, _streamed: bool = streamed) -> Any:
                await check(context)
                if not _streamed and request is _MALFORMED:
                    await refuse(context)
                result = _inner(screened(request, context) if _streamed else request, context)
                return await result if inspect.isawaitable(result) else result

            behavior = call
        wrapped: grpc.RpcMethodHandler[Any, Any] = make(
            behavior,
            request_deserializer=tolerant,
            response_serializer=handler.response_serializer,
        )
        return wrapped
    return handler


_MALFORMED = object()  # a request whose bytes did not parse as the method's message
