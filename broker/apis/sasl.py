"""SaslHandshake v0-1 and SaslAuthenticate v0-2: PLAIN and SCRAM-SHA-256/512 on SASL
listeners, with KIP-368 re-authentication. After a v0 handshake the tokens come as bare frames
(the connection hands each to :func:`authenticate` and writes its answer back bare). Kafka 4.0
dropped SaslHandshake v0 (KIP-896); kcoord keeps it because librdkafka before 2.x (Debian's
kcat) starts SASL only when v0 is advertised, even though it then uses v1.

A SASL listener's connection may send only ApiVersions, SaslHandshake and SaslAuthenticate
until it is authenticated (the connection enforces it). A failed authentication answers
SASL_AUTHENTICATION_FAILED with Kafka's generic message (nothing about which part was wrong)
and closes the connection. PLAIN checks the password against the user's SCRAM credential:
kcoord keeps one user database, managed with AlterUserScramCredentials / ``kcoord users``.
"""

from __future__ import annotations

import logging
import time

from broker.context import RequestContext
from broker.registry import serves
from broker.security.scram import MECHANISMS, ScramError, ScramServer
from broker.security.session import SecuritySession
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

log = logging.getLogger("kcoord.security")


def enabled(ctx: RequestContext) -> list[str]:
    return list(ctx.broker.config.get("sasl.enabled.mechanisms"))


@serves(ApiKey.SASL_HANDSHAKE, 0, 1)
def handshake(ctx: RequestContext, req: SaslHandshakeRequest) -> SaslHandshakeResponse:
    s = ctx.security
    mechanisms = enabled(ctx)
    if s is None or not s.sasl:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    if req.mechanism not in mechanisms:
        s.close_after_reply = True
        return SaslHandshakeResponse(
            error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms
        )
    if s.authenticated:
        s.reauthenticating = True  # KIP-368: the same principal must come back
    s.mechanism, s.exchange = req.mechanism, None
    s.raw_tokens = ctx.api_version == 0
    return SaslHandshakeResponse(mechanisms=mechanisms)


@serves(ApiKey.SASL_AUTHENTICATE, 0, 2)
def authenticate(ctx: RequestContext, req: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    s = ctx.security
    if s is None or not s.sasl or s.mechanism is None:
        if s is not None:
            s.close_after_reply = True
        return SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="Unexpected SaslAuthenticate: no SASL handshake in progress",
        )
    mechanism = s.mechanism
    try:
        reply, user = _step(ctx, s, mechanism, req.auth_bytes)
        if user is not None:
            principal = "User:" + user
            if s.reauthenticating and principal != s.principal:
                raise ScramError(f"re-authentication as {principal} instead of {s.principal}")
    except (ScramError, ValueError, UnicodeDecodeError) as e:
        log.info("SASL %s authentication from %s failed: %s", mechanism, ctx.client_host, e)
        if ctx.broker.metrics is not None:
            ctx.broker.metrics.authentication_failed(mechanism)
        s.close_after_reply = True
        s.exchange = None
        return SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
            error_message="Authentication failed during authentication due to invalid"
            f" credentials with SASL mechanism {mechanism}",
        )
    if user is None:
        return SaslAuthenticateResponse(auth_bytes=reply)
    s.principal, s.authenticated, s.reauthenticating = principal, True, False
    s.mechanism = s.exchange = None
    s.raw_tokens = False
    lifetime = ctx.broker.config.get("connections.max.reauth.ms")
    s.expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None
    return SaslAuthenticateResponse(
        auth_bytes=reply, session_lifetime_ms=lifetime if ctx.api_version >= 1 else 0
    )


def _step(
    ctx: RequestContext, s: SecuritySession, mechanism: str, token: bytes
) -> tuple[bytes, str | None]:
    """The reply token, and the user once the exchange succeeded."""
    store = ctx.broker.credentials
    if store is None:
        raise ScramError("no credential store")
    if mechanism == "PLAIN":
        authzid, user, password = token.decode("utf-8").split("\0")
        if authzid and authzid != user:
            raise ScramError("the authorization id must be the user name")
        for m in MECHANISMS:
            cred = store.get(user, m)
            if cred is not None and cred.check_password(m, password):
                return b"", user
        raise ScramError(f"invalid credentials for {user!r}")
    if s.exchange is None:
        s.exchange = ScramServer(mechanism, lambda user: store.get(user, mechanism))
        return s.exchange.first(token), None
    reply = s.exchange.final(token)
    return reply, s.exchange.user
