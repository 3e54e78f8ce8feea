"""Everything a request handler may reach: identity, settings, topics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.cluster import Identity
from broker.topics import TopicRegistry


@dataclass
class BrokerState:
    identity: Identity
    advertised_host: str
    advertised_port: int
    config: Any
    topics: TopicRegistry = field(default_factory=TopicRegistry)

    @property
    def node_id(self) -> int:
        return self.identity.node_id
