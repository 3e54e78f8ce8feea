"""The client side of SASL (PLAIN, SCRAM-SHA-256/512), for whoever logs in to a broker: the
broker to its peers (broker.cluster.peers), the admin commands (kcoord_admin) and the
benchmarks. A blocking login for ``protocol.client.Client`` and an asyncio one."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

from broker.security.scram import MECHANISMS, salted_password
from protocol.api_keys import ApiKey
from protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest

if TYPE_CHECKING:
    from protocol.client import AsyncConnection, Client


class AuthenticationError(Exception):
    pass


def jaas_credentials(jaas: str) -> tuple[str | None, str | None]:
    user = re.search(r'username\s*=\s*"([^"]*)"', jaas)
    password = re.search(r'password\s*=\s*"([^"]*)"', jaas)
    return (user.group(1) if user else None, password.group(1) if password else None)


def sasl_login(mechanism: str, user: str, password: str) -> Callable[[Client], None]:
    def authenticate(client: Client) -> None:
        r = client.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))
        if r.error_code:
            raise AuthenticationError(f"{mechanism} is not enabled: {r.mechanisms}")
        exchange = sasl_exchange(mechanism, user, password)
        token = next(exchange)
        while True:
            resp = client.request(
                ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token)
            )
            if resp.error_code:
                raise AuthenticationError(resp.error_message or "authentication failed")
            try:
                token = exchange.send(resp.auth_bytes)
            except StopIteration:
                return

    return authenticate


async def authenticate_async(
    conn: AsyncConnection, mechanism: str, user: str, password: str
) -> None:
    """The same exchange over an asyncio connection (``protocol.client.AsyncConnection``)."""
    r = await conn.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))
    if r.error_code:
        raise AuthenticationError(f"{mechanism} is not enabled: {r.mechanisms}")
    exchange = sasl_exchange(mechanism, user, password)
    token = next(exchange)
    while True:
        resp = await conn.request(
            ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token)
        )
        if resp.error_code:
            raise AuthenticationError(resp.error_message or "authentication failed")
        try:
            token = exchange.send(resp.auth_bytes)
        except StopIteration:
            return


def sasl_exchange(mechanism: str, user: str, password: str) -> Generator[bytes, bytes, None]:
    """The client side of PLAIN or SCRAM: yields each token to send and is sent the server's
    reply; returns when authenticated (raises AuthenticationError on a bad server answer)."""
    if mechanism == "PLAIN":
        yield f"\0{user}\0{password}".encode()
        return
    h = MECHANISMS[mechanism]
    nonce = base64.b64encode(secrets.token_bytes(18)).decode()
    name = user.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={name},r={nonce}"
    server_first = (yield ("n,," + first_bare).encode()).decode()
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    if not attrs["r"].startswith(nonce):
        raise AuthenticationError("the server's nonce does not extend ours")
    salted = salted_password(mechanism, password, base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored_key = hashlib.new(h, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = (yield f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, h).digest()).decode()
    if final != f"v={expected}":
        raise AuthenticationError("the server's signature is wrong")
