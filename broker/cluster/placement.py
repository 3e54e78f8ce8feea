"""Which live node should own a partition: rendezvous (highest random weight) hashing.

Every node computes the same answer from the same list of live nodes, with no coordination;
when a node joins or leaves, only the partitions it wins or held move (about 1/N of them).
The hash is a fixed function of the names (blake2b), never Python's per-process ``hash``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def _weight(node_id: int, topic: str, partition: int) -> int:
    digest = hashlib.blake2b(f"{node_id}/{topic}/{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(topic: str, partition: int, live_nodes: Iterable[int]) -> int | None:
    """The node that should own ``topic``-``partition``; None if no node is alive."""
    best: tuple[int, int] | None = None
    for n in live_nodes:
        w = (_weight(n, topic, partition), -n)
        if best is None or w > best:
            best = w
    return None if best is None else -best[1]


def assignment(
    partitions: Iterable[tuple[str, int]], live_nodes: Iterable[int]
) -> dict[tuple[str, int], int | None]:
    nodes = list(live_nodes)
    return {(t, p): owner(t, p, nodes) for t, p in partitions}
