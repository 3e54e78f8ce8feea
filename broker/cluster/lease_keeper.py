"""The task that keeps a node's registration and partition leases alive (cluster mode).

Every ``kcoord.cluster.renew.interval.ms`` it renews the node and, in one statement, every
lease it holds; leases the database no longer gives it (another node took them over after
they expired) are reported through ``on_lost``. When it cannot reach the database, it stops
claiming its leases before they could have expired: once ``lease.ms - 3 x renew.interval.ms``
has passed on its own monotonic clock since the last renewal that succeeded, every lease is
reported lost, so this node stops serving them before another node may take them over.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from storage.postgres import leases as L

log = logging.getLogger("kcoord.cluster")

Held = tuple[str, int, int]  # topic, partition, fencing epoch


class LeaseKeeper:
    def __init__(
        self,
        db: Any,
        node_id: int,
        lease_ms: int,
        renew_interval_ms: int,
        on_lost: Callable[[list[Held]], None],
        incarnation: uuid.UUID | None = None,
    ) -> None:
        self.db = db
        self.node_id = node_id
        self.incarnation = incarnation
        self.registered = True  # False once the database no longer has this process's row
        self.lease_ms = lease_ms
        self.renew_interval_ms = renew_interval_ms
        self.on_lost = on_lost
        self.held: set[Held] = set()
        self.last_renewed = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.last_renewed = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def acquire(self, topic: str, partition: int) -> int | None:
        epoch = await L.acquire(self.db, topic, partition, self.node_id, self.lease_ms)
        if epoch is not None:
            self.held.add((topic, partition, epoch))
        return epoch

    async def release(self, topic: str, partition: int, epoch: int) -> None:
        self.held.discard((topic, partition, epoch))
        await L.release(self.db, topic, partition, self.node_id, epoch)

    def _lose(self, lost: list[Held]) -> None:
        if lost:
            self.held.difference_update(lost)
            log.warning("lost %d partition lease(s): %s", len(lost), lost[:5])
            self.on_lost(lost)

    async def renew_once(self) -> None:
        if not await L.renew_node(self.db, self.node_id, self.lease_ms, self.incarnation):
            # Expired and taken by another process under this id (this one was paused): it
            # may hold these partitions now. Nothing is renewed until the node registers again.
            self.registered = False
            self._lose(sorted(self.held))
            return
        self.registered = True
        lost = await L.renew(self.db, self.node_id, sorted(self.held), self.lease_ms)
        self.last_renewed = time.monotonic()
        self._lose(lost)

    async def _run(self) -> None:
        every = self.renew_interval_ms / 1000
        # Checks come at least every two intervals (a sleep, then an attempt that may take
        # its whole timeout): giving up three intervals before the lease ends means the first
        # check past this point still comes before the database could let another node in.
        give_up = (self.lease_ms - 3 * self.renew_interval_ms) / 1000
        while True:
            await asyncio.sleep(every)
            try:
                await asyncio.wait_for(self.renew_once(), timeout=every)
            except Exception as e:  # noqa: BLE001 - any failure to renew counts the same
                log.warning("renewing leases failed: %s", e)
            if self.held and time.monotonic() - self.last_renewed >= give_up:
                self._lose(sorted(self.held))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
