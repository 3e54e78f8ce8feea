"""Several `kcoord serve` processes over one PostgreSQL database: a cluster for a test."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from protocol.api_keys import ApiKey
from protocol.client import Client
from protocol.messages import FindCoordinatorRequest, MetadataRequest
from tests.kcoord_process import KcoordProcess, start_kcoord

# Short leases so that a failover takes seconds; a renewal every 300 ms.
LEASE_MS = 3000
SETTINGS = (
    f"kcoord.cluster.lease.ms={LEASE_MS}",
    "kcoord.cluster.renew.interval.ms=300",
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=500",
)

T = TypeVar("T")


def wait_for(fn: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as e:  # noqa: BLE001 - a node may be on its way down or up
            last = e
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class Cluster:
    def __init__(self, base: Path, url: str, settings: tuple[str, ...] = SETTINGS) -> None:
        self.base = base
        self.url = url
        self.settings = settings
        self.nodes: dict[int, KcoordProcess] = {}  # by node id

    def start(self, node_id: int, port: int = 0) -> KcoordProcess:
        k = start_kcoord(
            self.base / f"node{node_id}",
            *self.settings,
            port=port,
            extra_args=("--storage", self.url, "--node-id", str(node_id)),
        )
        self.nodes[node_id] = k
        return k

    def alive(self) -> dict[int, KcoordProcess]:
        return {n: k for n, k in self.nodes.items() if k.proc.poll() is None}

    @property
    def bootstrap(self) -> str:
        return ",".join(k.bootstrap for k in self.alive().values())

    def stop(self, node_id: int, sig: int = signal.SIGTERM) -> None:
        self.nodes[node_id].stop(sig)

    def stop_all(self) -> None:
        for k in self.nodes.values():
            if k.proc.poll() is None:
                try:
                    k.proc.send_signal(signal.SIGCONT)  # a test may have left one stopped
                except ProcessLookupError:
                    pass
                k.stop()

    def client(self, node_id: int) -> Client:
        k = self.nodes[node_id]
        return Client(k.host, k.port)

    def coordinator(self, group: str, via: int) -> int:
        """The node FindCoordinator names for ``group``, asked of node ``via``; -1 if none."""
        with self.client(via) as c:
            resp = c.request(ApiKey.FIND_COORDINATOR, 1, FindCoordinatorRequest(key=group))
        return resp.node_id if resp.error_code == 0 else -1

    def leaders(self, topic: str, via: int) -> dict[int, int]:
        """Partition -> leader node of ``topic`` in node ``via``'s Metadata."""
        with self.client(via) as c:
            req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
            resp = c.request(ApiKey.METADATA, 9, req)
        [t] = resp.topics
        return {p.partition_index: p.leader_id for p in t.partitions}

    def brokers(self, via: int) -> dict[int, int]:
        """Node id -> port, as node ``via``'s Metadata lists them."""
        with self.client(via) as c:
            resp = c.request(ApiKey.METADATA, 9, MetadataRequest(topics=[]))
        return {b.node_id: b.port for b in resp.brokers}

    def settled(self, group: str) -> int:
        """Every live node names the same live coordinator for ``group``: that node, else 0."""
        alive = self.alive()
        answers = {self.coordinator(group, via) for via in alive}
        if len(answers) == 1:
            node = answers.pop()
            if node in alive:
                return node
        return 0
