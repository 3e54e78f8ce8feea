"""SASL/OAUTHBEARER (RFC 7628; Kafka's KIP-255 and KIP-768): the client sends a bearer token, a
JWT, and its subject becomes the principal.

Two validators, chosen as Kafka's brokers choose them:

- ``sasl.oauthbearer.jwks.endpoint.url`` set: the token must be signed (RS*, PS*, ES*, EdDSA)
  by a key of that JSON Web Key Set, fetched at start and every
  ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` (and again, rate-limited, when a token names a
  key id not seen yet: keys rotate). ``exp`` is required; ``nbf``/``iat`` are checked when
  present; ``aud`` and ``iss`` when ``sasl.oauthbearer.expected.audience`` / ``.issuer`` are set.
- not set: an *unsecured* JWS (``alg`` ``none``, no signature), Kafka's default validator, for
  development only: anyone can make such a token. The broker says so in its log at start.

Either way the subject is the ``sasl.oauthbearer.sub.claim.name`` claim, scopes come from
``sasl.oauthbearer.scope.claim.name``, times allow ``sasl.oauthbearer.clock.skew.seconds``, and
the token's expiry bounds the KIP-368 session. Validation errors are for the log; the client
only learns that authentication failed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.config import Config

if TYPE_CHECKING:
    from jwt import PyJWK

log = logging.getLogger("kcoord.security")

# Asymmetric algorithms only: a shared-secret (HS*) or "none" token cannot prove who signed it.
SIGNED_ALGORITHMS = frozenset(
    ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
)


class OAuthError(Exception):
    """The token is refused; the message is for the log, never for the client."""


class UnknownKey(OAuthError):
    """The token names a key the JWKS we hold lacks: fetch the set again, then retry."""


@dataclass(frozen=True)
class OAuthSettings:
    jwks_url: str | None = None
    audience: tuple[str, ...] = ()
    issuer: str | None = None
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    refresh_ms: int = 3_600_000
    backoff_ms: int = 100
    backoff_max_ms: int = 10_000

    @classmethod
    def from_config(cls, cfg: Config) -> OAuthSettings:
        p = "sasl.oauthbearer."
        return cls(
            jwks_url=cfg.get(p + "jwks.endpoint.url"),
            audience=tuple(cfg.get(p + "expected.audience")),
            issuer=cfg.get(p + "expected.issuer"),
            sub_claim=cfg.get(p + "sub.claim.name"),
            scope_claim=cfg.get(p + "scope.claim.name"),
            clock_skew_s=cfg.get(p + "clock.skew.seconds"),
            refresh_ms=cfg.get(p + "jwks.endpoint.refresh.ms"),
            backoff_ms=cfg.get(p + "jwks.endpoint.retry.backoff.ms"),
            backoff_max_ms=cfg.get(p + "jwks.endpoint.retry.backoff.max.ms"),
        )


@dataclass(frozen=True)
class BearerToken:
    principal: str  # the subject, without "User:"
    expires_ms: int  # wall clock, epoch milliseconds
    scopes: frozenset[str]


def client_first_message(message: bytes) -> tuple[str, str | None]:
    """The bearer token and the authorization id of a client's first message (RFC 7628 3.1):
    ``n,[a=authzid],`` then ``\\x01``-separated ``key=value`` pairs, ending ``\\x01\\x01``.
    Other pairs (KIP-342 extensions) are accepted and ignored, as Kafka's default does."""
    text = message.decode("utf-8")
    gs2, sep, rest = text.partition("\x01")
    fields = gs2.split(",")
    if not sep or len(fields) != 3 or fields[0] != "n" or fields[2]:
        raise OAuthError("malformed OAUTHBEARER message (GS2 header)")
    authzid = None
    if fields[1]:
        if not fields[1].startswith("a="):
            raise OAuthError("malformed OAUTHBEARER message (authorization id)")
        authzid = fields[1][2:]
    if not rest.endswith("\x01"):
        raise OAuthError("malformed OAUTHBEARER message (no final separator)")
    pairs: dict[str, str] = {}
    for item in rest[:-1].split("\x01"):
        if not item:
            continue
        key, eq, value = item.partition("=")
        if not eq:
            raise OAuthError("malformed OAUTHBEARER message (key/value pair)")
        pairs[key] = value
    scheme, _, token = pairs.get("auth", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise OAuthError("no bearer token in the OAUTHBEARER message")
    return token.strip(), authzid


class OAuthValidator:
    """Checks tokens with the configured validator; owns the JWKS refresh task."""

    def __init__(self, settings: OAuthSettings) -> None:
        self.settings = settings
        self.keys: dict[str | None, PyJWK] = {}  # key id -> jwt.PyJWK
        self._last_attempt = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def secured(self) -> bool:
        return self.settings.jwks_url is not None

    def start(self) -> None:
        if self.secured:
            self._loop_task = asyncio.get_running_loop().create_task(self._refresh_loop())
        else:
            log.warning(
                "OAUTHBEARER accepts unsecured tokens (no sasl.oauthbearer.jwks.endpoint.url):"
                " anyone can claim any principal; for development only"
            )

    async def close(self) -> None:
        for task in (self._loop_task, self._refreshing):
            if task is not None:
                task.cancel()

    # -- checking -------------------------------------------------------------------------

    def check(self, jwt_text: str, now_ms: int | None = None) -> BearerToken:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if self.secured:
            claims = self._verified_claims(jwt_text)
        else:
            claims = _unsecured_claims(jwt_text)
        return _token(claims, self.settings, now_ms)

    async def check_after_refresh(self, jwt_text: str) -> BearerToken:
        """``check`` once the key set has been fetched again (a token named an unknown key)."""
        await self.refresh_soon()
        return self.check(jwt_text)

    def _verified_claims(self, jwt_text: str) -> dict[str, Any]:
        import jwt

        try:
            header = jwt.get_unverified_header(jwt_text)
        except jwt.PyJWTError as e:
            raise OAuthError(f"malformed token: {e}") from None
        alg = header.get("alg")
        if alg not in SIGNED_ALGORITHMS:
            raise OAuthError(f"token algorithm {alg!r} is not accepted")
        kid = header.get("kid")
        key = self.keys.get(kid)
        if key is None and kid is None and len(self.keys) == 1:
            key = next(iter(self.keys.values()))
        if key is None:
            raise UnknownKey(f"no key {kid!r} in the JWKS")
        if getattr(key, "algorithm_name", None) not in (None, alg):
            raise OAuthError(f"key {kid!r} is for {key.algorithm_name}, the token says {alg}")
        s = self.settings
        try:
            return jwt.decode(
                jwt_text,
                key.key,
                algorithms=[alg],
                audience=list(s.audience) or None,
                issuer=s.issuer,
                leeway=s.clock_skew_s,
                options={"require": ["exp"], "verify_aud": bool(s.audience)},
            )
        except jwt.PyJWTError as e:
            raise OAuthError(f"token refused: {e}") from None

    # -- the key set ----------------------------------------------------------------------

    async def refresh_soon(self) -> None:
        """Fetch the key set again unless a fetch is running (then wait for it) or one was
        tried less than ``retry.backoff.ms`` ago."""
        if self._refreshing is not None and not self._refreshing.done():
            await asyncio.shield(self._refreshing)
            return
        if time.monotonic() - self._last_attempt < self.settings.backoff_ms / 1000:
            return
        self._refreshing = asyncio.get_running_loop().create_task(self._refresh())
        await asyncio.shield(self._refreshing)

    async def _refresh(self) -> None:
        self._last_attempt = time.monotonic()
        url = self.settings.jwks_url
        assert url is not None
        try:
            body = await asyncio.to_thread(_fetch, url)
            self.keys = parse_jwks(body)
        except (OSError, ValueError, OAuthError) as e:
            log.warning("fetching the JWKS from %s: %s", url, e)
            raise
        log.info("JWKS from %s: %d key(s)", url, len(self.keys))

    async def _refresh_loop(self) -> None:
        backoff = self.settings.backoff_ms / 1000
        while True:
            try:
                await self.refresh_soon()
            except (OSError, ValueError, OAuthError):
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.settings.backoff_max_ms / 1000)
                continue
            backoff = self.settings.backoff_ms / 1000
            await asyncio.sleep(self.settings.refresh_ms / 1000)


def _fetch(url: str) -> bytes:
    """The JWKS document at ``url`` (https, http or file), in a worker thread."""
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - the operator's URL
        return resp.read(1 << 20)


def parse_jwks(body: bytes) -> dict[str | None, PyJWK]:
    """The signing keys of a JWKS document by key id (keys we cannot use are skipped)."""
    import jwt

    try:
        doc = json.loads(body)
    except ValueError as e:
        raise OAuthError(f"JWKS is not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise OAuthError("JWKS has no 'keys' list")
    keys: dict[str | None, PyJWK] = {}
    for raw in doc["keys"]:
        if not isinstance(raw, dict) or raw.get("use", "sig") != "sig":
            continue
        try:
            k = jwt.PyJWK(raw)
        except jwt.PyJWTError as e:
            log.info("JWKS key %s skipped: %s", raw.get("kid"), e)
            continue
        keys[raw.get("kid")] = k
    if not keys:
        raise OAuthError("JWKS has no usable signing key")
    return keys


def _unsecured_claims(jwt_text: str) -> dict[str, Any]:
    parts = jwt_text.split(".")
    if len(parts) != 3:
        raise OAuthError("malformed token (expected three dot-separated parts)")
    if parts[2]:
        raise OAuthError("an unsecured token must not carry a signature")
    header = _json_part(parts[0])
    if header.get("alg") != "none":
        raise OAuthError(f"an unsecured token's alg must be 'none', not {header.get('alg')!r}")
    return _json_part(parts[1])


def _json_part(part: str) -> dict[str, Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except ValueError as e:
        raise OAuthError(f"malformed token part: {e}") from None
    if not isinstance(value, dict):
        raise OAuthError("malformed token part: not a JSON object")
    return value


def _token(claims: dict[str, Any], s: OAuthSettings, now_ms: int) -> BearerToken:
    """The principal, expiry and scopes of validated ``claims`` (times checked here for the
    unsecured validator; the signed one's library checked them already, the same way)."""
    skew_ms = s.clock_skew_s * 1000
    sub = claims.get(s.sub_claim)
    if not isinstance(sub, str) or not sub.strip():
        raise OAuthError(f"no {s.sub_claim!r} claim")
    exp = _seconds(claims, "exp")
    if exp is None:
        raise OAuthError("no 'exp' claim")
    if exp * 1000 + skew_ms <= now_ms:
        raise OAuthError("token expired")
    for name in ("iat", "nbf"):
        t = _seconds(claims, name)
        if t is not None and t * 1000 - skew_ms > now_ms:
            raise OAuthError(f"token {name} is in the future")
    scope = claims.get(s.scope_claim)
    if scope is None:
        scopes: frozenset[str] = frozenset()
    elif isinstance(scope, str):
        scopes = frozenset(scope.split())
    elif isinstance(scope, list) and all(isinstance(x, str) for x in scope):
        scopes = frozenset(scope)
    else:
        raise OAuthError(f"malformed {s.scope_claim!r} claim")
    return BearerToken(sub.strip(), int(exp * 1000), scopes)


def _seconds(claims: dict[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OAuthError(f"malformed {name!r} claim")
    return float(value)
