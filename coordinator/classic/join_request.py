"""One JoinGroup request, normalized: what the classic group and a consumer group with
classic members both need of it."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.classic.group import Parked, Protocols
from protocol.messages import JoinGroupRequest


@dataclass(slots=True)
class Join:
    """One JoinGroup request with the values the handlers need, normalized."""

    req: JoinGroupRequest
    client_id: str
    client_host: str
    version: int
    parked: Parked
    rebalance_timeout_ms: int
    protocols: Protocols

    @property
    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def reason(self, what: str) -> str:
        return f"{what}; client reason: {self.req.reason or 'not provided'}"
