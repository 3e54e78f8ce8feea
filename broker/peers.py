"""Requests from this node to another node of the cluster (the transaction coordinator's
WriteTxnMarkers to a partition's leader): one connection per node, opened when first needed
and dropped when it fails, at the address the node registered (its first listener)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from protocol.client import AsyncConnection, connect

log = logging.getLogger("kcoord.cluster")

REQUEST_TIMEOUT_S = 10.0


class PeerClients:
    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._conns: dict[tuple[str, int], AsyncConnection] = {}

    async def request(self, address: tuple[str, int], api_key: int, version: int, req: Any) -> Any:
        """The response, or an exception (OSError, ConnectionError, TimeoutError...) after
        which the connection is dropped."""
        conn = self._conns.get(address)
        try:
            if conn is None or conn.transport is None or conn.transport.is_closing():
                conn = await asyncio.wait_for(
                    connect(*address, lambda: AsyncConnection(self.client_id)), REQUEST_TIMEOUT_S
                )
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
