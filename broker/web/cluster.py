"""The whole cluster's answers for the console and the APIs: each node serves the groups it
coordinates (``?local=1``); the node asked gathers the other live nodes' answers from their
metrics listeners, which each node registers with its listeners as the ``KCOORD_HTTP``
endpoint. The caller's Authorization header goes along, so every node shows the caller only
what its principal may DESCRIBE (the users and ACLs are the cluster's). Over HTTPS the other
nodes' certificates are checked against the broker's trust store (``ssl.truststore.*``) or
the system's CAs."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from broker.cluster.view import ClusterView

log = logging.getLogger("kcoord.web")

HTTP_ENDPOINT = "KCOORD_HTTP"
TIMEOUT_S = 5.0


class HttpPeers:
    def __init__(self, view: ClusterView, tls: ssl.SSLContext | None) -> None:
        self.view = view  # broker.cluster.view.ClusterView
        self.tls = tls
        self._session: aiohttp.ClientSession | None = None

    def addresses(self) -> dict[int, tuple[str, int]]:
        out = {}
        for node_id, node in self.view.others.items():
            found = node.on(HTTP_ENDPOINT)
            if found is not None and found.endpoints:
                out[node_id] = (found.host, found.port)
        return out

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
        return self._session

    async def get(self, node_id: int, path: str, headers: Mapping[str, str]) -> object:
        """The node's JSON answer, or None (not reachable, refused, not found)."""
        address = self.addresses().get(node_id)
        if address is None:
            return None
        host, port = address
        scheme = "https" if self.tls is not None else "http"
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        forward = {k: v for k, v in headers.items() if k.lower() == "authorization"}
        try:
            async with self._client().get(
                f"{scheme}://{netloc}{path}",
                headers=forward,
                ssl=self.tls if self.tls is not None else False,
            ) as resp:
                if resp.status != 200:
                    return None
                return await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            log.info("node %d did not answer %s: %s", node_id, path, e)
            return None

    async def gather(self, path: str, headers: Mapping[str, str]) -> list[Any]:
        nodes = list(self.addresses())
        answers = await asyncio.gather(*(self.get(n, path, headers) for n in nodes))
        return [a for a in answers if isinstance(a, dict)]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
