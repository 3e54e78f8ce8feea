"""Who may read the metrics endpoint: over HTTPS with the broker's key store
(``kcoord.metrics.ssl.enabled``; ``listener.name.metrics.ssl.*`` for settings of its own, and
client certificates only when ``listener.name.metrics.ssl.client.auth`` asks for them), with
HTTP Basic credentials of a kcoord user (``kcoord.metrics.authentication=basic``: the user's
SCRAM password, checked as SASL/PLAIN checks it), and, with an authorizer, only for principals
allowed DESCRIBE on the cluster. The console and the lag APIs on the same listener authenticate
callers the same way and show them the groups they may DESCRIBE (``broker/web/``).
"""

from __future__ import annotations

import base64
import binascii
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.security.authorizer import CLUSTER_NAME, Operation, ResourceType
from broker.security.session import ANONYMOUS
from broker.security.tls import principal_of

if TYPE_CHECKING:
    from broker.state import BrokerState

log = logging.getLogger("kcoord.security")

METRICS_LISTENER = "metrics"  # the name its listener.name.<name>.ssl.* settings use


@dataclass(frozen=True)
class Refusal:
    status: str  # the HTTP status line's code and reason
    challenge: bool = False  # send WWW-Authenticate: Basic


UNAUTHORIZED = Refusal("401 Unauthorized", challenge=True)
FORBIDDEN = Refusal("403 Forbidden")


class MetricsAccess:
    def __init__(self, state: BrokerState, basic: bool, mapping_rules: str) -> None:
        self.state = state  # BrokerState: its credentials and authorizer, as they change
        self.basic = basic
        self.mapping_rules = mapping_rules

    def check(
        self, headers: Mapping[str, str], ssl_object: ssl.SSLObject | None, host: str
    ) -> Refusal | None:
        """None if the scrape may proceed, else the refusal to answer."""
        who = self.authenticate(headers, ssl_object)
        if isinstance(who, Refusal):
            return who
        return self.authorize_scrape(who, host)

    def authenticate(
        self, headers: Mapping[str, str], ssl_object: ssl.SSLObject | None
    ) -> str | Refusal:
        """The caller's principal (its client certificate's, or its Basic credentials' user
        when they are asked for), or the refusal to answer."""
        principal = ANONYMOUS
        if ssl_object is not None:
            principal = principal_of(ssl_object, self.mapping_rules)
        if self.basic:
            user = self._basic_user(headers.get("authorization", ""))
            if user is None:
                return UNAUTHORIZED
            principal = "User:" + user
        return principal

    def authorize_scrape(self, principal: str, host: str) -> Refusal | None:
        """A scrape needs DESCRIBE on the cluster under an authorizer."""
        auth = self.state.authorizer
        if auth is not None and not auth.authorize(
            principal, host, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME
        ):
            log.info("metrics scrape by %s from %s refused: no DESCRIBE on the cluster",
                     principal, host)  # fmt: skip
            return FORBIDDEN
        return None

    def _basic_user(self, header: str) -> str | None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = (
                base64.b64decode(value.strip(), validate=True).decode().partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            return None
        store = self.state.credentials
        if not sep or store is None or not store.check_password(user, password):
            if self.state.metrics is not None:
                self.state.metrics.authentication_failed("metrics-basic")
            return None
        return user
