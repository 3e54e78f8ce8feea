"""A message whose body is already encoded: for a reply sent again and again unchanged, the
connection copies its bytes instead of running the encoder (see
`broker/apis/consumer_group_heartbeat.py`, whose steady-state replies are the case)."""

from __future__ import annotations

from protocol.codec import MessageBase


class Encoded(MessageBase):
    """The encoded body of one message at one version (the header is not part of it)."""

    __slots__ = ("body", "version")
    _fields = ("body", "version")

    def __init__(self, body: bytes, version: int) -> None:
        self.body = body
        self.version = version

    def encode(self, version: int) -> bytes:
        assert version == self.version, f"encoded for v{self.version}, asked for v{version}"
        return self.body
