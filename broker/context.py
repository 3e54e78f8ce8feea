"""What a handler knows about the request it is answering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.listeners import Listener
    from broker.security.session import SecuritySession
    from broker.state import BrokerState


@dataclass(slots=True)
class RequestContext:
    broker: BrokerState
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    listener: Listener | None = None  # the listener the request came in on
    security: SecuritySession | None = None  # who sent it (TLS certificate, SASL)

    @property
    def principal(self) -> str:
        return "User:ANONYMOUS" if self.security is None else self.security.principal

    def authorized_operations(self, resource_type: int, name: str = "kafka-cluster") -> int:
        """The bit field of the operations the client may do on the resource, for the
        `authorized_operations` fields clients ask for (Kafka's encoding: bit n = operation n)."""
        from broker.security.authorizer import SUPPORTED_OPERATIONS

        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):  # type: ignore[call-overload]
            if self.allowed(op, resource_type, name):
                bits |= 1 << op
        return bits

    def allowed(self, operation: int, resource_type: int, name: str = "kafka-cluster") -> bool:
        """Whether the client may do ``operation`` on the resource (always, without an
        authorizer)."""
        auth = self.broker.authorizer
        if auth is None:
            return True
        return auth.authorize(self.principal, self.client_host, operation, resource_type, name)

    @property
    def listener_name(self) -> str | None:
        return None if self.listener is None else self.listener.name

    def setting(self, name: str) -> Any:
        """Setting ``name`` as the request's listener sees it (``listener.name.<l>.`` first)."""
        from broker.config import listener_setting

        return listener_setting(
            self.broker.config, self.listener.name if self.listener else None, name
        )

    def advertised(self) -> tuple[str, int]:
        """The broker's address as the client's listener advertises it (Kafka answers each
        client with the endpoint of the listener it used)."""
        if self.listener is not None:
            return self.listener.advertised_host, self.listener.advertised_port
        return self.broker.advertised_host, self.broker.advertised_port
