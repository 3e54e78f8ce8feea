"""OAUTHBEARER token checks without a broker: the client's message, unsecured tokens, and
signed tokens against a JWKS served on loopback (rotation included)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import jwt
import pytest

from broker.security.oauth import (
    OAuthError,
    OAuthSettings,
    OAuthValidator,
    UnknownKey,
    client_first_message,
)
from tests.security.oauth_idp import AUDIENCE, ISSUER, IdentityProvider, unsecured_token


def test_client_first_message() -> None:
    assert client_first_message(b"n,,\x01auth=Bearer abc.def.\x01\x01") == ("abc.def.", None)
    assert client_first_message(b"n,a=alice,\x01auth=Bearer t\x01x=1\x01\x01") == ("t", "alice")
    for bad in (
        b"n,,auth=Bearer t",  # no separators
        b"y,,\x01auth=Bearer t\x01\x01",  # channel binding flag
        b"n,,\x01auth=Basic dXNlcg==\x01\x01",  # not a bearer token
        b"n,,\x01auth=Bearer \x01\x01",  # empty token
        b"n,,\x01auth=Bearer t",  # no final separator
        b"n,u=x,\x01auth=Bearer t\x01\x01",  # not an authorization id
    ):
        with pytest.raises(OAuthError):
            client_first_message(bad)


def test_unsecured_tokens() -> None:
    v = OAuthValidator(OAuthSettings(clock_skew_s=0))
    now = int(time.time())
    t = v.check(unsecured_token({"sub": "alice", "exp": now + 60, "scope": "a b"}))
    assert (t.principal, t.expires_ms, t.scopes) == ("alice", (now + 60) * 1000, {"a", "b"})
    t = v.check(unsecured_token({"sub": "bob", "exp": now + 60, "scope": ["x"]}))
    assert t.scopes == {"x"}
    refused = [
        unsecured_token({"sub": "alice", "exp": now - 1}),  # expired
        unsecured_token({"sub": "alice"}),  # no exp
        unsecured_token({"exp": now + 60}),  # no subject
        unsecured_token({"sub": "", "exp": now + 60}),
        unsecured_token({"sub": "alice", "exp": now + 60, "iat": now + 120}),  # issued later
        unsecured_token({"sub": "alice", "exp": "soon"}),
        unsecured_token({"sub": "alice", "exp": now + 60}, alg="RS256"),
        unsecured_token({"sub": "alice", "exp": now + 60}, signature="c2ln"),
        "not-a-token",
        "e30.e30",
    ]
    for token in refused:
        with pytest.raises(OAuthError):
            v.check(token)


def test_unsecured_claim_names_and_skew() -> None:
    v = OAuthValidator(OAuthSettings(sub_claim="client_id", scope_claim="scp", clock_skew_s=30))
    now = int(time.time())
    t = v.check(unsecured_token({"client_id": "svc", "exp": now - 10, "scp": "read"}))
    assert (t.principal, t.scopes) == ("svc", {"read"})  # 10 s late is within the skew


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    p = IdentityProvider()
    p.add_key("k1")
    yield p
    p.close()


def test_signed_tokens_against_a_jwks(idp: IdentityProvider) -> None:
    async def run() -> None:
        v = OAuthValidator(
            OAuthSettings(jwks_url=idp.url, audience=(AUDIENCE,), issuer=ISSUER, backoff_ms=1)
        )
        await v.refresh_soon()
        assert v.check(idp.token("alice", "k1")).principal == "alice"
        refused = [
            idp.token("alice", "k1", aud="other"),
            idp.token("alice", "k1", iss="https://elsewhere"),
            idp.token("alice", "k1", lifetime_s=-60),  # expired beyond the 30 s skew
            jwt.encode({"sub": "alice", "exp": time.time() + 60}, "s" * 32, algorithm="HS256"),
            unsecured_token({"sub": "alice", "exp": time.time() + 60}),
            idp.token("alice", "k1")[:-4] + "AAAA",  # signature tampered
        ]
        for token in refused:
            with pytest.raises(OAuthError) as e:
                v.check(token)
            assert not isinstance(e.value, UnknownKey)
        # A key the provider has not published yet: unknown, even after fetching again.
        idp.add_key("k2", publish=False)
        with pytest.raises(UnknownKey):
            v.check(idp.token("alice", "k2"))
        fetches = idp.fetches
        with pytest.raises(UnknownKey):
            await v.check_after_refresh(idp.token("alice", "k2"))
        assert idp.fetches == fetches + 1
        # Rotation: published now, found by the fetch an unknown key id causes.
        idp.published.append("k2")
        await asyncio.sleep(0.01)  # past retry.backoff.ms
        assert (await v.check_after_refresh(idp.token("bob", "k2"))).principal == "bob"

    asyncio.run(run())


def test_refetches_are_rate_limited(idp: IdentityProvider) -> None:
    async def run() -> None:
        v = OAuthValidator(OAuthSettings(jwks_url=idp.url, backoff_ms=60_000))
        await v.refresh_soon()
        for _ in range(5):  # a client retrying with a bad key id does not hammer the IdP
            await v.refresh_soon()
        assert idp.fetches == 1

    asyncio.run(run())


def test_a_jwks_that_cannot_be_used(tmp_path) -> None:
    async def run() -> None:
        for body in (b"not json", b'{"keys": []}', b'{"keys": [{"kty": "RSA", "n": "x"}]}'):
            path = tmp_path / "jwks.json"
            path.write_bytes(body)
            v = OAuthValidator(OAuthSettings(jwks_url=path.as_uri()))
            with pytest.raises(OAuthError):
                await v.refresh_soon()
            assert v.keys == {}

    asyncio.run(run())
