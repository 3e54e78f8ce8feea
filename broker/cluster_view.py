"""Who is alive and who leads which partition, as the handlers answer it (Metadata,
FindCoordinator, DescribeCluster).

On one node (the file engine) this node is the whole cluster and leads every partition at
epoch 0. In cluster mode (``broker/cluster_node.py``) the view is what this node last read
from the database, refreshed every renew interval, with its own leases exact: a client told
a stale leader gets NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER there and asks again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker import placement
from protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    host: str
    port: int
    rack: str | None = None


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

    def address(self, node_id: int, own: tuple[str, int]) -> tuple[str, int] | None:
        """A node's address; ``own`` is this node's on the client's listener."""
        if node_id == self.self_id:
            return own
        node = self.others.get(node_id)
        return None if node is None else (node.host, node.port)

    def brokers(self, own: tuple[str, int]) -> list[NodeAddress]:
        """Every live node, this one at the client's listener's address."""
        me = NodeAddress(self.self_id, own[0], own[1], self.rack)
        return sorted([me, *self.others.values()], key=lambda n: n.node_id)
