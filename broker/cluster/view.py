"""Who is alive and who leads which partition, as the handlers answer it (Metadata,
FindCoordinator, DescribeCluster).

On one node (the file engine) this node is the whole cluster and leads every partition at
epoch 0. In cluster mode (``broker/cluster/node.py``) the view is what this node last read
from the database, refreshed every renew interval, with its own leases exact: a client told
a stale leader gets NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER there and asks again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker import listeners
from broker.cluster import placement
from protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    host: str  # the inter-broker listener's (what other nodes connect to)
    port: int
    rack: str | None = None
    # Every listener's advertised address by listener name; empty for a registration that
    # named none (one listener, or a node before schema version 4): host/port for all.
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def on(self, listener: str | None) -> NodeAddress | None:
        """This node as clients of ``listener`` reach it; None if it has no such listener
        (Kafka leaves such a broker out of the answer)."""
        if listener is None or not self.endpoints:
            return self
        for name, host, port in self.endpoints:
            if name == listener:
                return NodeAddress(self.node_id, host, port, self.rack, self.endpoints)
        return None


def format_endpoints(endpoints: list[tuple[str, str, int]]) -> str:
    return ",".join(f"{name}://{_bracket(host)}:{port}" for name, host, port in endpoints)


def parse_endpoints(text: str | None) -> tuple[tuple[str, str, int], ...]:
    """``format_endpoints``'s text back, read as ``listeners`` is; an unreadable one (from
    another kcoord version) is ignored: the node stays reachable at its host/port."""
    try:
        return tuple(listeners.parse_endpoints(text or "", "registered endpoints"))
    except listeners.ListenerError:
        return ()


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass
class ClusterView:
    self_id: int
    clustered: bool = False
    # Live nodes other than this one, by id (this node's address is the client's listener's).
    others: dict[int, NodeAddress] = field(default_factory=dict)
    # (topic, partition) -> (leader node, leader epoch), for live leases.
    leaders: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # This node's own leases: exact (the database's answer to its acquisitions).
    own: dict[tuple[str, int], int] = field(default_factory=dict)
    rack: str | None = None

    def leader(self, topic: str, partition: int) -> tuple[int, int]:
        """(node id, leader epoch); node -1 while no live node holds the partition."""
        if not self.clustered:
            return self.self_id, 0
        key = (topic, partition)
        epoch = self.own.get(key)
        if epoch is not None:
            return self.self_id, epoch
        found = self.leaders.get(key)
        if found is not None and found[0] != self.self_id and found[0] in self.others:
            return found
        return -1, -1

    def partition_fields(self, topic: str, partition: int) -> dict[str, Any]:
        """A partition's leader as Metadata and DescribeTopicPartitions give it: its one
        replica, or LEADER_NOT_AVAILABLE with leader -1 while no live node holds it."""
        node, epoch = self.leader(topic, partition)
        replicas = [node] if node >= 0 else []
        return {
            "error_code": ErrorCode.NONE if node >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": partition,
            "leader_id": node,
            "leader_epoch": epoch,
            "replica_nodes": replicas,
            "isr_nodes": replicas,
        }

    def live_ids(self) -> list[int]:
        return sorted([self.self_id, *self.others])

    def target(self, topic: str, partition: int) -> int | None:
        """The node placement gives the partition to among the live ones."""
        return placement.owner(topic, partition, self.live_ids())

    def address(
        self, node_id: int, own: tuple[str, int], listener: str | None = None
    ) -> tuple[str, int] | None:
        """A node's address on ``listener`` (None: the inter-broker one); ``own`` is this
        node's on the client's listener."""
        if node_id == self.self_id:
            return own
        node = self.others.get(node_id)
        found = None if node is None else node.on(listener)
        return None if found is None else (found.host, found.port)

    def brokers(self, own: tuple[str, int], listener: str | None = None) -> list[NodeAddress]:
        """Every live node that has ``listener``, at its address there (this one at
        ``own``)."""
        me = NodeAddress(self.self_id, own[0], own[1], self.rack)
        others = [n for n in (o.on(listener) for o in self.others.values()) if n is not None]
        return sorted([me, *others], key=lambda n: n.node_id)
