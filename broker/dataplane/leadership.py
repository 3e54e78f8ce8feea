"""Cluster mode, data plane side: which topic partitions this node leads, and the topics
other nodes created or deleted.

Every node opens every topic partition (its log in the shared database) but appends to and
serves only those it holds the lease of: ``lead`` reopens the partition under the lease's
fencing epoch (so that a write after the lease moved on fails in the database) and folds its
producer state from the batches stored; ``resign`` stops serving it (NOT_LEADER_OR_FOLLOWER)
and lets the writes in flight finish. The topic catalog other nodes change is brought in line
by the store itself (``TopicStore.refresh_catalog``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker.dataplane.partition import Partition

if TYPE_CHECKING:
    from broker.dataplane.store import TopicStore

log = logging.getLogger("kcoord.cluster")


async def lead(store: TopicStore, topic: str, index: int, epoch: int) -> bool:
    """Serve ``topic``-``index`` under ``epoch``; False if this node does not know the
    partition (yet). Raises FencedError if the lease moved on meanwhile."""
    parts = store.partitions.get(topic)
    if parts is None or not 0 <= index < len(parts):
        return False
    assert store.engine is not None, "leases are the PostgreSQL engine's"
    new = await Partition.open_on(store.engine, topic, index, store.settings[topic], epoch=epoch)
    new.on_grown = store.maintenance.schedule_check
    if store.on_log_failed is not None:
        failed = store.on_log_failed
        new.on_failed = lambda part, exc: failed(part.topic, part.index, exc)
    old, parts[index] = parts[index], new
    await _retire(old)
    return True


async def resign(store: TopicStore, topic: str, index: int) -> None:
    """Stop serving ``topic``-``index``: new requests get NOT_LEADER_OR_FOLLOWER; waits for
    the appends in flight (a handoff), whose replies then go out."""
    parts = store.partitions.get(topic)
    if parts is None or not 0 <= index < len(parts):
        return
    part = parts[index]
    part.leading = False
    await _retire(part, keep=True)


async def _retire(part: Partition, keep: bool = False) -> None:
    try:
        await part.log.close()
    except Exception as e:  # a fenced or failed log: nothing in flight can succeed anyway
        log.debug("closing %s-%d: %s", part.topic, part.index, e)
    part.retired = True  # what its log did not store by now, it never will
    if not keep:
        part.closed = True
    part.wake()  # long polls answer now; their next fetch is refused or goes elsewhere
