"""The client side of kcoord's security, for its own admin commands: Kafka client properties
(a `--command-config` file, as Kafka's tools take) turned into a TLS context and a SASL
exchange (PLAIN, SCRAM-SHA-256/512) run on each new connection."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import ssl
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from broker.security.scram import MECHANISMS, salted_password
from protocol.api_keys import ApiKey
from protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class SecurityConfigError(ValueError):
    pass


class AuthenticationError(Exception):
    pass


@dataclass(frozen=True)
class ClientSecurity:
    ssl_context: ssl.SSLContext | None
    authenticate: Callable[[Any], None] | None


def read_properties(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#!":
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise SecurityConfigError(f"{path}: {line!r} is not name=value")
            out[key.strip()] = value.strip()
    return out


def jaas_credentials(jaas: str) -> tuple[str | None, str | None]:
    user = re.search(r'username\s*=\s*"([^"]*)"', jaas)
    password = re.search(r'password\s*=\s*"([^"]*)"', jaas)
    return (user.group(1) if user else None, password.group(1) if password else None)


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """From Kafka's client property names (and librdkafka's `sasl.username`/`sasl.password`,
    `ssl.ca.location`)."""
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise SecurityConfigError(f"security.protocol: {protocol} is not one of {PROTOCOLS}")
    ctx = _tls_context(props) if protocol in ("SSL", "SASL_SSL") else None
    auth = None
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
        user, password = _user(props)
        if mechanism not in ("PLAIN", *MECHANISMS):
            raise SecurityConfigError(f"sasl.mechanism: {mechanism} is not supported here")
        if user is None or password is None:
            raise SecurityConfigError("SASL needs a username and password (sasl.jaas.config)")
        auth = _sasl(mechanism, user, password)
    return ClientSecurity(ctx, auth)


def _tls_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """The client side of TLS from Kafka's client properties (trust store, certificate)."""
    ca = props.get("ssl.truststore.location") or props.get("ssl.ca.location")
    ctx = ssl.create_default_context(cafile=ca)
    if props.get("ssl.endpoint.identification.algorithm", "https") == "":
        ctx.check_hostname = False
    cert = props.get("ssl.keystore.location") or props.get("ssl.certificate.location")
    if cert:
        ctx.load_cert_chain(cert, props.get("ssl.key.location"), props.get("ssl.key.password"))
    return ctx


def _user(props: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The SASL user and password: librdkafka's names first, else the JAAS text's."""
    user, password = jaas_credentials(props.get("sasl.jaas.config", ""))
    return props.get("sasl.username", user), props.get("sasl.password", password)


def metrics_access(
    props: Mapping[str, str],
) -> tuple[ssl.SSLContext | None, str | None]:
    """How to scrape a secured metrics endpoint with the same properties: the TLS context
    (trust store, client certificate) for an https URL, and the Basic credentials of the
    SASL user when the properties name one."""
    ctx = _tls_context(props)
    user, password = _user(props)
    basic = None
    if user is not None and password is not None:
        basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return ctx, basic


def _sasl(mechanism: str, user: str, password: str) -> Callable[[Any], None]:
    def authenticate(client: Any) -> None:
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


async def authenticate_async(conn: Any, mechanism: str, user: str, password: str) -> None:
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
