"""Cluster mode: a take of a partition waits for every unload of it still running, not only
the latest one registered (a failed write's give-up, then the lease lost)."""

from __future__ import annotations

import asyncio

from broker.cluster.node import ClusterNode


async def test_a_take_waits_for_an_earlier_unload_of_the_partition_too() -> None:
    node = ClusterNode.__new__(ClusterNode)  # only the unload bookkeeping is exercised
    node._loading = set()
    node._unloads = {}
    key = ("t", 0)
    first_may_end = asyncio.Event()
    ended: list[str] = []

    async def unload(name: str, until: asyncio.Event | None = None) -> None:
        if until is not None:
            await until.wait()
        ended.append(name)

    loop = asyncio.get_running_loop()
    node._track_unload(key, loop.create_task(unload("give-up", first_may_end)))
    node._track_unload(key, loop.create_task(unload("lost")))
    pending = node._unloads[key]  # what a take awaits
    await asyncio.sleep(0.01)
    assert ended == ["lost"] and not pending.done()  # the earlier one still runs
    first_may_end.set()
    await pending
    assert ended == ["lost", "give-up"]
    await asyncio.sleep(0)
    assert key not in node._unloads and not node._loading
