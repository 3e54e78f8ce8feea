"""SaslHandshake v0-1 and SaslAuthenticate v0-2: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER
(`broker/security/oauth.py`) on SASL listeners, with KIP-368 re-authentication. After a v0
handshake the tokens come as bare frames (the connection hands each to :func:`authenticate`
and writes its answer back bare). Kafka 4.0 dropped SaslHandshake v0 (KIP-896); kcoord keeps
it because librdkafka before 2.x (Debian's kcat) starts SASL only when v0 is advertised, even
though it then uses v1.

A SASL listener's connection may send only ApiVersions, SaslHandshake and SaslAuthenticate
until it is authenticated (the connection enforces it). A failed authentication answers
SASL_AUTHENTICATION_FAILED with Kafka's generic message (nothing about which part was wrong)
and closes the connection connection.failed.authentication.delay.ms later (KIP-306). PLAIN
checks the password against the user's SCRAM credential: kcoord keeps one user database,
managed with AlterUserScramCredentials / ``kcoord users``.
"""

from __future__ import annotations

import logging
import time

from broker.context import RequestContext
from broker.registry import serves
from broker.security.oauth import (
    BearerToken,
    OAuthError,
    OAuthValidator,
    UnknownKey,
    client_first_message,
)
from broker.security.scram import ScramError, ScramServer
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
    return list(ctx.setting("sasl.enabled.mechanisms"))


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
def authenticate(ctx: RequestContext, req: SaslAuthenticateRequest):
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
        if mechanism == "OAUTHBEARER":
            return _bearer(ctx, s, req.auth_bytes)
        reply, user = _step(ctx, s, mechanism, req.auth_bytes)
    except (ScramError, OAuthError, ValueError, UnicodeDecodeError) as e:
        return _failed(ctx, s, mechanism, e)
    if user is None:
        return SaslAuthenticateResponse(auth_bytes=reply)
    return _succeeded(ctx, s, mechanism, user, reply)


def _failed(
    ctx: RequestContext, s: SecuritySession, mechanism: str, why: Exception
) -> SaslAuthenticateResponse:
    log.info("SASL %s authentication from %s failed: %s", mechanism, ctx.client_host, why)
    if ctx.broker.metrics is not None:
        ctx.broker.metrics.authentication_failed(mechanism)
    s.close_after_reply = True
    s.exchange = None
    return SaslAuthenticateResponse(
        error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
        error_message="Authentication failed during authentication due to invalid"
        f" credentials with SASL mechanism {mechanism}",
    )


def _succeeded(
    ctx: RequestContext,
    s: SecuritySession,
    mechanism: str,
    user: str,
    reply: bytes,
    credential_expires_ms: int | None = None,
) -> SaslAuthenticateResponse:
    principal = "User:" + user
    if s.reauthenticating and principal != s.principal:
        why = ScramError(f"re-authentication as {principal} instead of {s.principal}")
        return _failed(ctx, s, mechanism, why)
    s.principal, s.authenticated, s.reauthenticating = principal, True, False
    s.mechanism = s.exchange = None
    s.raw_tokens = False
    lifetime = ctx.setting("connections.max.reauth.ms")
    if lifetime > 0 and credential_expires_ms is not None:
        # KIP-368: a token's session ends no later than the token (Kafka's rule).
        lifetime = max(1, min(lifetime, credential_expires_ms - int(time.time() * 1000)))
    s.expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None
    return SaslAuthenticateResponse(
        auth_bytes=reply, session_lifetime_ms=lifetime if ctx.api_version >= 1 else 0
    )


def _bearer(ctx: RequestContext, s: SecuritySession, message: bytes):
    """OAUTHBEARER: one client message, checked by the configured validator. A refused token
    fails at once (Kafka first sends an RFC 7628 error challenge and fails after the client's
    empty answer; clients end in the same place). A token naming a key we have not fetched
    yet is checked again once the key set has been fetched."""
    validator = ctx.broker.oauth
    if validator is None:
        raise OAuthError("OAUTHBEARER is not enabled")
    jwt_text, authzid = client_first_message(message)
    try:
        token = validator.check(jwt_text)
    except UnknownKey:
        return _bearer_after_refresh(ctx, s, validator, jwt_text, authzid)
    return _bearer_checked(ctx, s, token, authzid)


async def _bearer_after_refresh(
    ctx: RequestContext,
    s: SecuritySession,
    validator: OAuthValidator,
    jwt_text: str,
    authzid: str | None,
) -> SaslAuthenticateResponse:
    try:
        token = await validator.check_after_refresh(jwt_text)
        return _bearer_checked(ctx, s, token, authzid)
    except (OAuthError, OSError, ValueError) as e:
        return _failed(ctx, s, "OAUTHBEARER", e)


def _bearer_checked(
    ctx: RequestContext, s: SecuritySession, token: BearerToken, authzid: str | None
) -> SaslAuthenticateResponse:
    if authzid and authzid != token.principal:
        why = OAuthError(f"authorization id {authzid!r} is not the token's {token.principal!r}")
        return _failed(ctx, s, "OAUTHBEARER", why)
    return _succeeded(ctx, s, "OAUTHBEARER", token.principal, b"", token.expires_ms)


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
        if store.check_password(user, password):
            return b"", user
        raise ScramError(f"invalid credentials for {user!r}")
    if s.exchange is None:
        s.exchange = ScramServer(mechanism, lambda user: store.get(user, mechanism))
        return s.exchange.first(token), None
    reply = s.exchange.final(token)
    return reply, s.exchange.user
