"""Cluster mode: this node's part in a cluster of kcoord nodes sharing one PostgreSQL engine.

The database decides who owns what (``storage/postgres/leases.py``); this module acts on it.
Every ``kcoord.cluster.renew.interval.ms`` a balance round:

1. reads the live nodes and the leases (the view Metadata and FindCoordinator answer from),
   topics other nodes created or deleted (through the data plane), and the users and ACLs
   they changed;
2. for every partition (the ``__consumer_offsets`` ones and every topic's), asks placement
   which live node should own it: one this node should own and nobody holds is acquired
   (a new fencing epoch) and loaded, replayed and served; one this node holds that placement
   gives to another live node is handed off: flushed, then released, so that node takes it
   at its next round.

The ``LeaseKeeper`` renews this node's leases meanwhile; a lease it loses (taken over after
it expired, or given up because the database could not be reached in time), or a write the
database refuses as fenced, unloads the partition at once. On shutdown every partition is
handed off and the node deregisters, so the others take over without waiting for expiry.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from broker.cluster.lease_keeper import Held, LeaseKeeper
from broker.cluster.view import ClusterView, NodeAddress, parse_endpoints
from broker.dataplane import leadership
from storage.log import FencedError
from storage.postgres import leases as L

if TYPE_CHECKING:
    from broker.dataplane.store import TopicStore
    from broker.partition_runtime import PartitionRuntime
    from broker.share.runtime import ShareRuntime
    from storage.postgres.store import PgStore

log = logging.getLogger("kcoord.cluster")

# How long a node that lost a topic partition's lease waits to read the catalog (was the topic
# deleted?) before it resigns the partition anyway.
LOST_CATALOG_WAIT_S = 1.0

TAKE_CONCURRENCY = 8  # partitions acquired and opened at once in a round
STOP_STEP_S = 5.0  # how long a graceful stop waits for the handoff, and for deregistering


class ClusterNode:
    def __init__(
        self,
        db: PgStore,
        view: ClusterView,
        runtimes: Sequence[PartitionRuntime[Any]],
        data: TopicStore,
        address: tuple[str, int],
        lease_ms: int,
        renew_interval_ms: int,
        shared: Sequence[Callable[[], Awaitable[None]]] = (),
        endpoints: str | None = None,
        share: ShareRuntime | None = None,
    ) -> None:
        self.db = db
        # Share groups on: a led topic partition's share state is read back before it is
        # served, and given up with it (ShareRuntime.lead and resign).
        self.share = share
        self._share_led: dict[tuple[str, int], uuid.UUID] = {}
        # What other nodes change in the database and this one reads each round (the SCRAM
        # credentials, the ACLs).
        self.shared = list(shared)
        self.view = view
        # The coordinator runtimes (group, transaction) by topic: a partition of one of these
        # topics is loaded by its runtime; any other is a topic partition the data plane leads.
        self.runtimes: dict[str, PartitionRuntime[Any]] = {rt.topic: rt for rt in runtimes}
        self.data = data
        self.address = address  # the inter-broker listener's, where other nodes connect
        self.endpoints = endpoints  # every listener's (cluster_view.format_endpoints)
        self.lease_ms = lease_ms
        self.renew_interval_ms = renew_interval_ms
        self.incarnation = uuid.uuid4()
        self.node_id = view.self_id
        self.keeper = LeaseKeeper(
            db, self.node_id, lease_ms, renew_interval_ms, self._lost, self.incarnation
        )
        for rt in runtimes:
            rt.on_fenced = functools.partial(self._fenced, rt.topic)
            rt.lease_valid = functools.partial(self._runtime_lease_valid, rt)
        data.lease_valid = self.keeper.valid
        data.on_log_failed = self._log_failed
        self._task: asyncio.Task[None] | None = None
        self._round = asyncio.Lock()
        self._slots = asyncio.Semaphore(TAKE_CONCURRENCY)
        self._loading: set[asyncio.Task[None]] = set()  # loads and unloads in flight
        # The unload of a lost lease, per partition, until it is done: taking the partition
        # again waits for it (else the old tenure's unload, running late, would close the new
        # tenure's logs and drop the share state it just read back).
        self._unloads: dict[tuple[str, int], asyncio.Task[None]] = {}
        self.first_round = asyncio.Event()
        self.stopping = False

    # -- start and stop ---------------------------------------------------------------------

    async def start(self) -> None:
        """Register (waiting, while a previous process with this node id is still live),
        then run balance rounds."""
        waited = False
        while not await self._register():
            if not waited:
                log.warning(
                    "node id %d is registered by another live process; waiting for its"
                    " registration to expire (kcoord.cluster.lease.ms=%d)",
                    self.node_id,
                    self.lease_ms,
                )
                waited = True
            await asyncio.sleep(self.renew_interval_ms / 1000)
        log.info("registered as node %d of the cluster", self.node_id)
        self.keeper.start()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Graceful: hand every partition off, then deregister. Bounded: what does not finish
        in time is left to lease expiry (and logged)."""
        self.stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for task in list(self._loading):
            task.cancel()
        await asyncio.gather(*self._loading, return_exceptions=True)
        held = sorted(self.keeper.held)
        try:
            async with asyncio.timeout(STOP_STEP_S):
                await asyncio.gather(*(self._hand_off(h) for h in held), return_exceptions=True)
        except TimeoutError:
            left = sorted(self.keeper.held)
            log.warning(
                "handoff unfinished after %ss: %d lease(s) left to expire: %s",
                STOP_STEP_S,
                len(left),
                left[:5],
            )
        await self.keeper.stop()
        try:
            async with asyncio.timeout(STOP_STEP_S):
                await L.deregister_node(self.db, self.node_id)
        except Exception as e:  # noqa: BLE001 - the registration expires by itself
            log.warning("deregistering node %d failed: %r", self.node_id, e)
        log.info("node %d left the cluster (%d partitions handed off)", self.node_id, len(held))

    # -- balance rounds ---------------------------------------------------------------------

    async def _run(self) -> None:
        every = self.renew_interval_ms / 1000
        while True:
            try:
                async with self._round:
                    await self.balance()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the next round tries again
                log.warning("cluster balance round failed: %s", e)
            if not self.first_round.is_set():
                self.first_round.set()
                self._spawn(self._loaded_after_first_round())
            await asyncio.sleep(every)

    async def _loaded_after_first_round(self) -> None:
        """A runtime counts as loaded once the first balance round took this node's
        partitions and they loaded."""
        for rt in self.runtimes.values():
            while not rt.all_loaded():
                await asyncio.sleep(0.05)
            rt.loaded.set()

    async def balance(self) -> None:
        if not self.keeper.registered:
            await self._register_again()
            return
        await self._refresh_view()
        if self.data.engine is not None:
            await self.data.refresh_catalog()
        for refresh in self.shared:
            await refresh()
        wanted = self._partitions()
        held = {(t, p): e for t, p, e in self.keeper.held}
        to_take = [tp for tp in wanted if tp not in held and self.view.target(*tp) == self.node_id]
        to_give = [
            (t, p, e)
            for (t, p), e in held.items()
            if (t, p) not in wanted
            or (self.view.target(t, p) != self.node_id and self.view.target(t, p) is not None)
        ]
        for h in to_give:
            await self._hand_off(h)
        if to_take:
            await asyncio.gather(*(self._take(t, p) for t, p in to_take))

    def _partitions(self) -> set[tuple[str, int]]:
        found = {(t, p) for t, rt in self.runtimes.items() for p in range(rt.partitions)}
        for topic in self.data.registry.all():
            if not topic.internal:
                found.update((topic.name, p) for p in range(topic.partitions))
        return found

    async def _refresh_view(self) -> None:
        nodes = await L.nodes(self.db)
        self.view.others = {
            n.node_id: NodeAddress(n.node_id, n.host, n.port, n.rack, parse_endpoints(n.endpoints))
            for n in nodes
            if n.alive and n.node_id != self.node_id
        }
        self.view.leaders = {
            (x.topic, x.partition): (x.owner, x.epoch)
            for x in await L.leases(self.db)
            if x.live and x.owner is not None
        }

    async def _register(self) -> bool:
        host, port = self.address
        return await L.register_node(
            self.db,
            self.node_id,
            host,
            port,
            self.view.rack,
            self.lease_ms,
            self.incarnation,
            self.endpoints,
        )

    async def _register_again(self) -> None:
        if await self._register():
            self.keeper.registered = True
            log.warning("node %d registered again", self.node_id)

    # -- taking and giving partitions -------------------------------------------------------

    async def _take(self, topic: str, partition: int) -> None:
        pending = self._unloads.get((topic, partition))
        if pending is not None:
            await asyncio.gather(pending, return_exceptions=True)
        async with self._slots:
            if self.stopping:
                return
            epoch = await self.keeper.acquire(topic, partition)
            if epoch is None:
                return  # another live node holds it: it hands it off or its lease expires
            log.info("took %s-%d (epoch %d)", topic, partition, epoch)
            runtime = self.runtimes.get(topic)
            if runtime is not None:
                self.view.own[topic, partition] = epoch
                # Loading replays the partition: in its own task, so that a long replay does
                # not hold the round (requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile).
                runtime.claim(partition, epoch)
                self._spawn(runtime.take(partition, epoch))
                return
            try:
                await self._share_lead(topic, partition, epoch)
                if not await leadership.lead(self.data, topic, partition, epoch):
                    await self._share_resign(topic, partition)
                    await self._forget((topic, partition, epoch), release=True)
                elif (topic, partition, epoch) not in self.keeper.held:
                    # Lost (or given up after a failed write) while it opened: that unload
                    # resigned the tenure before this one was installed, so resign it now
                    # (else it stayed installed as leading, with a log that stops at this
                    # moment, for the next tenure's take to find).
                    await self._resign(topic, partition)
                else:
                    # Metadata names this node the leader only now that it serves the
                    # partition: named while its share state and log were still being read
                    # back, it refused the clients it had just sent there (NOT_LEADER_OR_
                    # FOLLOWER from the node that says it leads).
                    self.view.own[topic, partition] = epoch
            except FencedError:
                await self._share_resign(topic, partition)
                await self._forget((topic, partition, epoch), release=False)
            except Exception as e:  # noqa: BLE001 - the database failed: give it up, retry later
                log.warning("taking %s-%d failed: %s", topic, partition, e)
                await self._share_resign(topic, partition)
                await self._forget((topic, partition, epoch), release=True)

    async def _share_lead(self, topic: str, partition: int, epoch: int) -> None:
        known = self.data.registry.get(topic)
        if self.share is None or known is None:
            return
        self._share_led[topic, partition] = known.topic_id
        await self.share.lead(known.topic_id, partition, epoch)

    async def _share_resign(self, topic: str, partition: int) -> None:
        topic_id = self._share_led.pop((topic, partition), None)
        if self.share is not None and topic_id is not None:
            await self.share.resign(topic_id, partition)

    async def _resign(self, topic: str, partition: int) -> None:
        await leadership.resign(self.data, topic, partition)
        await self._share_resign(topic, partition)

    async def _resign_lost(self, topic: str, partition: int) -> None:
        """Resign a topic partition whose lease was lost. A lease is also lost when another
        node deleted the topic (its rows go with it), so the catalog is read first, briefly:
        then the requests parked on the partition are woken with the topic gone
        (UNKNOWN_TOPIC_ID) rather than NOT_LEADER_OR_FOLLOWER. Nothing is served meanwhile:
        the partition stopped leading when the lease was lost."""
        try:
            await asyncio.wait_for(self._refresh_catalog(), LOST_CATALOG_WAIT_S)
        except Exception as e:  # noqa: BLE001 - a database out of reach: resign anyway
            log.debug("catalog not read before resigning %s-%d: %r", topic, partition, e)
        await self._resign(topic, partition)

    async def _refresh_catalog(self) -> None:
        if self.data.engine is None:
            return
        # A balance round reads it too. It may be waiting for this resignation (a take waits
        # for the partition's unload): the caller's time limit breaks that wait.
        async with self._round:
            await self.data.refresh_catalog()

    async def _hand_off(self, h: Held) -> None:
        """Flush and stop serving, then release the lease for the partition's new owner."""
        topic, partition, epoch = h
        self.view.own.pop((topic, partition), None)
        runtime = self.runtimes.get(topic)
        if runtime is not None:
            await runtime.give_up(partition, flush=True)
        else:
            await self._resign(topic, partition)
        await self.keeper.release(topic, partition, epoch)
        log.info("handed off %s-%d (epoch %d)", topic, partition, epoch)

    async def _forget(self, h: Held, *, release: bool) -> None:
        self.view.own.pop((h[0], h[1]), None)
        if release:
            await self.keeper.release(*h)
        else:
            self.keeper.discard(h)

    def _lost(self, lost: list[Held]) -> None:
        """The keeper lost these leases: stop serving them now (no flush: they are fenced)."""
        for topic, partition, _ in lost:
            self.view.own.pop((topic, partition), None)
            runtime = self.runtimes.get(topic)
            if runtime is not None:
                # It stops serving now; the task finishes the unload.
                task = self._spawn(runtime.give_up(partition, flush=False))
            else:
                part = self.data.partition(topic, partition)
                if part is not None:
                    part.leading = False  # now, not when the task runs
                task = self._spawn(self._resign_lost(topic, partition))
            self._track_unload((topic, partition), task)

    def _track_unload(self, key: tuple[str, int], task: asyncio.Task[None]) -> None:
        """Register an unload for a take of the partition to wait for. One still running for
        the same partition (a failed write's give-up, then the lease lost) stays awaited: the
        entry becomes a task that ends when both have (a take that waited only for the later
        one overlapped the earlier one's resignation, which closed the new tenure's share
        state while it was read back)."""
        # The loop keeps only weak references to tasks: hold each until it is done.
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)
        earlier = self._unloads.get(key)
        if earlier is not None and not earlier.done():
            both = asyncio.get_running_loop().create_task(_both(earlier, task))
            self._loading.add(both)
            both.add_done_callback(self._loading.discard)
            self._unloads[key] = both
            both.add_done_callback(self._unloaded)
        else:
            self._unloads[key] = task
            task.add_done_callback(self._unloaded)

    def _unloaded(self, task: asyncio.Task[None]) -> None:
        for key in [k for k, t in self._unloads.items() if t is task]:
            del self._unloads[key]

    def _log_failed(self, topic: str, partition: int, exc: BaseException) -> None:
        """A write of a topic partition led here failed (its log, or its share state log):
        that log takes no more appends, and the producer state or share state in memory may
        hold what it did not store. The partition stops being served now and is given up
        (the lease released, or forgotten if the write was fenced); the next round takes it
        again, reading the producer state and the share state back from what the database
        committed. Found by the fault harness: after a PostgreSQL failover a partition kept
        its lease but not its log, refusing every write until the lease happened to lapse."""
        key = (topic, partition)
        part = self.data.partition(topic, partition)
        if part is not None:
            part.leading = False
        if key in self._unloads:
            return  # already being given up
        held = [h for h in self.keeper.held if h[:2] == key]
        if not held:
            return  # lost meanwhile: its unload runs
        fenced = isinstance(exc, FencedError)
        log.warning(
            "%s-%d: a write failed (%s); giving the partition up to take it again",
            topic,
            partition,
            exc,
        )
        task = asyncio.get_running_loop().create_task(self._give_up_failed(held[0], fenced))
        self._track_unload(key, task)

    async def _give_up_failed(self, h: Held, fenced: bool) -> None:
        topic, partition, epoch = h
        self.view.own.pop((topic, partition), None)
        self.keeper.discard(h)  # no longer renewed, whatever the release does
        await self._resign(topic, partition)
        if fenced:
            return
        try:
            await L.release(self.db, topic, partition, self.node_id, epoch)
        except Exception as e:  # noqa: BLE001 - the lease then expires by itself
            log.debug("releasing %s-%d after a failed write: %r", topic, partition, e)

    def _spawn(self, coro: Coroutine[object, None, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        # The loop keeps only weak references to tasks: hold each until it is done.
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)
        return task

    def _runtime_lease_valid(self, rt: PartitionRuntime[Any], p: int) -> bool:
        epoch = rt.owned.get(p)
        return epoch is not None and self.keeper.valid(rt.topic, p, epoch)

    def _fenced(self, topic: str, partition: int) -> None:
        """A write of a coordinator partition was refused as fenced: forget its lease."""
        self.view.own.pop((topic, partition), None)
        for h in [h for h in self.keeper.held if h[:2] == (topic, partition)]:
            self.keeper.discard(h)


async def _both(a: asyncio.Task[None], b: asyncio.Task[None]) -> None:
    await asyncio.gather(a, b, return_exceptions=True)
