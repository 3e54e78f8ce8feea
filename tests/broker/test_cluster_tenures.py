"""Cluster mode: a topic partition's tenure whose lease was lost while it opened is never
served, not even once the partition is acquired again under a newer epoch.

Found by the fault harness (a 10-minute run, partitions changing hands four times in 14 s
under load): the lost lease's unload resigned the partition before the opening tenure was
installed, which then stayed in place marked as leading; when the node acquired the partition
again, the per-partition lease check passed for it while the new tenure opened, and it
answered from a log that ended where it had been opened: Fetch OFFSET_OUT_OF_RANGE (an
aiokafka member reset to earliest), Produce OUT_OF_ORDER_SEQUENCE_NUMBER.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.cluster import node as node_module
from broker.cluster.lease_keeper import LeaseKeeper
from broker.cluster.node import ClusterNode
from broker.dataplane import leadership
from broker.dataplane.store import TopicStore

T = "data"


class FakeLog:
    async def close(self) -> None:
        pass


def tenure(epoch: int, leading: bool = True) -> SimpleNamespace:
    return SimpleNamespace(
        topic=T,
        index=0,
        leader_epoch=epoch,
        leading=leading,
        retired=False,
        closed=False,
        log=FakeLog(),
        wake=lambda: None,
    )


def make_node(monkeypatch: pytest.MonkeyPatch) -> tuple[ClusterNode, TopicStore]:
    store = TopicStore.__new__(TopicStore)  # only leadership bookkeeping is exercised
    store.partitions = {T: [tenure(0, leading=False)]}
    store.engine = None
    store.registry = SimpleNamespace(get=lambda name: None)  # no share groups here
    store.lease_valid = None
    node = ClusterNode.__new__(ClusterNode)
    node.data = store
    node.share = None
    node._share_led = {}
    node.runtimes = {}
    node.view = SimpleNamespace(own={})
    node.stopping = False
    node._slots = asyncio.Semaphore(8)
    node._round = asyncio.Lock()
    node._loading = set()
    node._unloads = {}
    node.keeper = LeaseKeeper(None, 1, 3000, 500, node._lost)
    store.lease_valid = node.keeper.valid
    epochs = iter([6, 8])

    async def acquire(db: object, topic: str, partition: int, owner: int, *ms: int) -> int:
        return next(epochs)

    monkeypatch.setattr(node_module.L, "acquire", acquire)
    return node, store


async def test_a_tenure_whose_lease_was_lost_while_it_opened_is_never_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node, store = make_node(monkeypatch)
    opening = asyncio.Event()
    may_open = asyncio.Event()

    async def lead(store_: TopicStore, topic: str, index: int, epoch: int) -> bool:
        opening.set()
        await may_open.wait()  # Partition.open_on, slow under load
        store_.partitions[topic][index] = tenure(epoch)
        return True

    monkeypatch.setattr(leadership, "lead", lead)
    take = asyncio.create_task(node._take(T, 0))
    await asyncio.wait_for(opening.wait(), 5)
    node.keeper._lose([(T, 0, 6)])  # the renewal found it lost (or stale) meanwhile
    await asyncio.gather(*node._unloads.values())
    may_open.set()
    await take
    old = store.partitions[T][0]
    assert old.leader_epoch == 6
    assert not store.leads(old)

    # Taken again under epoch 8: while the new tenure opens, the old one must not answer.
    opening.clear()
    may_open.clear()
    take = asyncio.create_task(node._take(T, 0))
    await asyncio.wait_for(opening.wait(), 5)
    assert (T, 0, 8) in node.keeper.held
    assert store.partitions[T][0] is old
    assert not store.leads(old), "the lost tenure answers for the partition again"
    may_open.set()
    await take
    assert store.leads(store.partitions[T][0]) and store.partitions[T][0].leader_epoch == 8
