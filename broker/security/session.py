"""What a connection knows about its client's identity, and the SASL exchange in progress."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

ANONYMOUS = "User:ANONYMOUS"


@dataclass
class SecuritySession:
    sasl: bool  # the listener requires SASL before any other request
    principal: str = ANONYMOUS
    authenticated: bool = False
    mechanism: str | None = None  # chosen by SaslHandshake
    exchange: Any = None  # the mechanism's server state between SaslAuthenticate rounds
    expires_at: float | None = None  # monotonic; KIP-368 re-authentication deadline
    close_after_reply: bool = False
    reauthenticating: bool = field(default=False)
    # After SaslHandshake v0 the SASL tokens come as bare frames, not SaslAuthenticate
    # requests (old clients: librdkafka before 1.x's SaslAuthenticate support).
    raw_tokens: bool = False

    def __post_init__(self) -> None:
        self.authenticated = not self.sasl

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at
