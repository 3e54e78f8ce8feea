"""Requests from this node to another node of the cluster (the transaction coordinator's
WriteTxnMarkers to a partition's leader): one connection per node, opened when first needed
and dropped when it fails, at the address the node registered (its inter-broker listener:
``inter.broker.listener.name``, else its first), with that listener's TLS and SASL."""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.security.sasl_client import authenticate_async
from protocol.client import AsyncConnection

if TYPE_CHECKING:
    from protocol.codec import MessageBase

log = logging.getLogger("kcoord.cluster")

REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PeerSecurity:
    """How to reach the inter-broker listener: its TLS (client side) and SASL login."""

    tls: ssl.SSLContext | None = None
    mechanism: str | None = None
    user: str = ""
    password: str = field(default="", repr=False)


class PeerClients:
    def __init__(self, client_id: str, security: PeerSecurity | None = None) -> None:
        self.client_id = client_id
        self.security = security or PeerSecurity()
        self._conns: dict[tuple[str, int], AsyncConnection] = {}

    async def _connect(self, address: tuple[str, int]) -> AsyncConnection:
        sec = self.security
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            lambda: AsyncConnection(self.client_id),
            *address,
            ssl=sec.tls,
            server_hostname=address[0] if sec.tls is not None else None,
        )
        if sec.mechanism is not None:
            await authenticate_async(conn, sec.mechanism, sec.user, sec.password)
        return conn

    async def request(
        self, address: tuple[str, int], api_key: int, version: int, req: MessageBase
    ) -> Any:
        """The response, or an exception (OSError, ConnectionError, TimeoutError...) after
        which the connection is dropped."""
        conn = self._conns.get(address)
        try:
            if conn is None or conn.transport is None or conn.transport.is_closing():
                conn = await asyncio.wait_for(self._connect(address), REQUEST_TIMEOUT_S)
                self._conns[address] = conn
            return await asyncio.wait_for(conn.request(api_key, version, req), REQUEST_TIMEOUT_S)
        except BaseException:
            dropped = self._conns.pop(address, None)
            if dropped is not None:
                dropped.close()
            raise

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
