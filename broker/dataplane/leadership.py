"""Cluster mode, data plane side: which topic partitions this node leads, and the topics
other nodes created or deleted.

Every node opens every topic partition (its log in the shared database) but appends to and
serves only those it holds the lease of: ``lead`` reopens the partition under the lease's
fencing epoch (so that a write after the lease moved on fails in the database) and folds its
producer state from the batches stored; ``resign`` stops serving it (NOT_LEADER_OR_FOLLOWER)
and lets the writes in flight finish. ``refresh`` brings the topic catalog in line with the
one in the database, which any node may have changed.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from broker.dataplane.catalog import CATALOG_FILE, EngineCatalog
from broker.dataplane.partition import Partition
from broker.dataplane.topicconfig import TopicSettings

if TYPE_CHECKING:
    from broker.dataplane.store import TopicStore

log = logging.getLogger("kcoord.cluster")


async def lead(store: TopicStore, topic: str, index: int, epoch: int) -> bool:
    """Serve ``topic``-``index`` under ``epoch``; False if this node does not know the
    partition (yet). Raises FencedError if the lease moved on meanwhile."""
    parts = store.partitions.get(topic)
    if parts is None or not 0 <= index < len(parts):
        return False
    new = await Partition.open_on(store.engine, topic, index, store.settings[topic], epoch=epoch)
    new.on_grown = store.maintenance.schedule_check
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


async def refresh(store: TopicStore) -> None:
    """Register topics created on other nodes (not led here until their leases say so) and
    drop the ones deleted there. Every round calls it: nothing is parsed unless the stored
    catalog changed."""
    raw = await store.engine.read_meta(CATALOG_FILE)
    if raw is None or (isinstance(store.catalog, EngineCatalog) and raw == store.catalog.stored):
        return
    fresh = EngineCatalog.from_bytes(store.engine, raw)
    known = store.catalog.topics
    for name, rec in fresh.topics.items():
        if rec.internal:
            continue
        mine = known.get(name)
        if mine is not None and mine.topic_id != rec.topic_id:
            # Deleted and created again elsewhere: the old topic's offsets, share state and
            # share sessions go as for any deletion, and the new one starts clean.
            await _forget(store, name)
            _deleted(store, name, mine.topic_id)
            mine = None
        have = len(store.partitions.get(name, ()))
        if mine is None:
            known[name] = rec
            store._register(rec)
        else:
            if rec.partitions > mine.partitions:
                mine.partitions = rec.partitions
                store._register(mine)
            if rec.configs != mine.configs:  # altered on another node
                mine.configs = dict(rec.configs)
                store.apply_settings(name, TopicSettings.resolve(store.config, mine.configs))
        if rec.partitions > have:
            await store._open_partitions(name, have, rec.partitions, leading=False)
    gone = [(n, r.topic_id) for n, r in known.items() if not r.internal and n not in fresh.topics]
    for name, topic_id in gone:
        await _forget(store, name)
        _deleted(store, name, topic_id)
    store.catalog.producer_id_block_end = max(
        store.catalog.producer_id_block_end, fresh.producer_id_block_end
    )
    if isinstance(store.catalog, EngineCatalog):
        # What this node's next save replaces: the state it has just merged.
        store.catalog.stored = fresh.stored


def _deleted(store: TopicStore, name: str, topic_id: uuid.UUID) -> None:
    for listener in store.on_topic_deleted:
        try:
            listener(name, 0, topic_id)
        except Exception:
            log.exception("topic deletion listener failed")


async def _forget(store: TopicStore, name: str) -> None:
    store.catalog.topics.pop(name, None)
    store.registry.remove(name)
    store.settings.pop(name, None)
    await store._close_partitions(name)
    log.info("topic %s was deleted by another node", name)
