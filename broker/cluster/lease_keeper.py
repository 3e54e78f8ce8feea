"""The task that keeps a node's registration and partition leases alive (cluster mode).

Every ``kcoord.cluster.renew.interval.ms`` it renews the node and, in one statement, every
lease it holds; leases the database no longer gives it (another node took them over after
they expired) are reported through ``on_lost``. When it cannot reach the database, it stops
claiming its leases before they could have expired: once ``lease.ms - 3 x renew.interval.ms``
has passed on its own monotonic clock since the last acquisition or renewal of a lease that
succeeded was *sent* (the database's expiry counts from a moment after that), that lease is
reported lost, so this node stops serving it before another node may take it over.
:meth:`LeaseKeeper.valid` says the same at any instant, for the request paths to check before
they answer as an owner: a process resumed after a pause may handle requests before this task
has run.

One renewal is in flight at a time, and a slow one is waited for while it can still help: its
success makes the leases valid again counting from when it was sent, so it is given up only
once that is ``give_up_s`` ago. Cancelling it after one interval (as before) threw good
renewals away under load: in a 30-minute fault run with 0.3 s intervals 1,866 renewals were
cancelled so (PostgreSQL logged 496 cancellations of commits already made, waiting for the
synchronous standby), and two healthy nodes gave up every lease during another node's cut
from the database (issue 29's availability excess).
A renewal given up is abandoned, not awaited: asyncpg's cancellation of a statement opens a
connection of its own to send PostgreSQL's cancel request, which hangs as long as the network
to the database does (a fault test found this task stuck there for the whole cut, its leases
served past their expiry).
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
        # Per held lease: when the last successful acquisition or renewal of it was sent (the
        # database's expiry counts from later). Per lease, since one acquired after a long
        # outage is fresh while the rest are not.
        self.fresh: dict[tuple[str, int], float] = {}
        self.give_up_s = (lease_ms - 3 * renew_interval_ms) / 1000
        self._task: asyncio.Task[None] | None = None
        self._abandoned: set[asyncio.Task[None]] = set()
        self._attempt: asyncio.Task[None] | None = None  # the renewal in flight

    def valid(self, topic: str, partition: int, epoch: int) -> bool:
        """Whether this node's lease of the partition under ``epoch`` is held and certainly
        still its own now (by its monotonic clock, counted from the last successful
        acquisition or renewal): requests are answered by a tenure only while this holds.
        Per tenure, not per partition: a tenure whose lease was lost while it opened stayed
        installed, and once the partition was acquired again under a newer epoch it passed a
        per-partition check and answered from its stale log before the new tenure replaced it
        (a fault run: Fetch answered OFFSET_OUT_OF_RANGE, a producer OUT_OF_ORDER_SEQUENCE)."""
        if (topic, partition, epoch) not in self.held:
            return False
        since = self.fresh.get((topic, partition))
        return since is not None and time.monotonic() - since < self.give_up_s

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def acquire(self, topic: str, partition: int) -> int | None:
        sent = time.monotonic()
        epoch = await L.acquire(
            self.db, topic, partition, self.node_id, self.lease_ms, self.renew_interval_ms
        )
        if epoch is not None:
            self.held.add((topic, partition, epoch))
            self.fresh[(topic, partition)] = sent
        return epoch

    async def release(self, topic: str, partition: int, epoch: int) -> None:
        self.discard((topic, partition, epoch))
        await L.release(self.db, topic, partition, self.node_id, epoch)

    def discard(self, h: Held) -> None:
        self.held.discard(h)
        if not any(x[:2] == h[:2] for x in self.held):
            self.fresh.pop(h[:2], None)

    def _lose(self, lost: list[Held]) -> None:
        # Only leases still held: a renewal abandoned under load may answer long after its
        # leases were given up, when the node holds the partition again under a newer epoch;
        # reported lost, the new tenure was resigned while its lease stayed held and renewed,
        # so no node served the partition (found by the fault harness under load).
        lost = [h for h in lost if h in self.held]
        if lost:
            for h in lost:
                self.discard(h)
            log.warning("lost %d partition lease(s): %s", len(lost), lost[:5])
            self.on_lost(lost)

    async def renew_once(self) -> None:
        sent = time.monotonic()
        if not await L.renew_node(self.db, self.node_id, self.lease_ms, self.incarnation):
            # Expired and taken by another process under this id (this one was paused): it
            # may hold these partitions now. Nothing is renewed until the node registers again.
            self.registered = False
            self._lose(sorted(self.held))
            return
        self.registered = True
        asked = sorted(self.held)
        lost = await L.renew(self.db, self.node_id, asked, self.lease_ms)
        self._lose(lost)  # before valid() holds again: those are not served any more
        kept = set(asked).difference(lost)
        for h in self.held & kept:
            # only forward: an abandoned renewal finishing late must not make a lease look
            # older than a later acquisition of it
            self.fresh[h[:2]] = max(self.fresh.get(h[:2], sent), sent)

    async def _run(self) -> None:
        every = self.renew_interval_ms / 1000
        # Checks come at least every interval (a sleep, then a wait bounded by one more):
        # giving up three intervals before the lease ends means the first check past this
        # point still comes before the database could let another node in.
        started = 0.0
        while True:
            await asyncio.sleep(every)
            if self._attempt is None:
                started = time.monotonic()
                self._attempt = asyncio.get_running_loop().create_task(self.renew_once())
            attempt = self._attempt
            done, _ = await asyncio.wait({attempt}, timeout=every)
            if done:
                self._attempt = None
                if attempt.exception() is not None:
                    log.warning("renewing leases failed: %s", attempt.exception())
            elif time.monotonic() - started >= self.give_up_s:
                # Even its success now would leave no lease valid: try again afresh.
                self._attempt = None
                self._abandon(attempt)
                log.warning("renewing leases failed: no answer within %.1fs", self.give_up_s)
            stale = [h for h in self.held if not self.valid(*h)]
            if stale:
                self._lose(sorted(stale))

    def _abandon(self, attempt: asyncio.Task[None]) -> None:
        """Cancel without waiting for the cancellation to finish (see the module's note)."""
        attempt.cancel()
        self._abandoned.add(attempt)
        attempt.add_done_callback(self._abandoned.discard)
        attempt.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def stop(self) -> None:
        if self._attempt is not None:
            self._abandon(self._attempt)
            self._attempt = None
        for t in list(self._abandoned):
            t.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
