"""Kafka client properties (a `--command-config` file, as Kafka's tools take) for the admin
commands: a TLS context and a SASL login (broker.security.sasl_client) run on each new
connection, and the same properties for scraping a secured metrics endpoint."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.listeners import PROTOCOLS
from broker.security.sasl_client import jaas_credentials, sasl_login
from broker.security.scram import MECHANISMS


class SecurityConfigError(ValueError):
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
        auth = sasl_login(mechanism, user, password)
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
