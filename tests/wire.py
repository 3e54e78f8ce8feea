"""The blocking client of protocol-level tests: protocol.client's, strict about trailing bytes
and correlation ids, plus a check that the broker closed the connection."""

from __future__ import annotations

from protocol.client import Client


class WireClient(Client):
    def __init__(self, host: str, port: int, client_id: str = "wire-test") -> None:
        super().__init__(host, port, timeout=10, client_id=client_id)

    def __enter__(self) -> WireClient:
        return self

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
