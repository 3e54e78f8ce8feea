"""Drives the transaction coordinator: the `__transaction_state` logs and the markers.

Each of the `transaction.state.log.num.partitions` partitions has its log (compacted, in the
data directory or the storage engine, like `__consumer_offsets`) and a pure
`coordinator.txn.TxnCoordinator` rebuilt from it at start-up. A transactional id lives in
partition `Utils.abs(hashCode) % partitions`, Kafka's rule.

A decision's record is written and made durable before its reply goes out; while it is in
flight the id is pending (CONCURRENT_TRANSACTIONS to anything else it is asked). Ending a
transaction writes PrepareCommit/PrepareAbort, then a marker to every partition of the
transaction (topic partitions through the data plane, `__consumer_offsets` partitions through
the group runtime, which commits or drops the pending offsets), then CompleteCommit /
CompleteAbort. EndTxn is answered once the markers are durable: the completion, which a
restart redoes from the prepared state, holds the id's next request instead of the reply. A
transaction found prepared after a restart is completed the same way.
Timed-out transactions are aborted under a bumped epoch (fencing their producer), and ids
unused for `transactional.id.expiration.ms` are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.loading import PartitionHealth, load_until_served
from broker.tasks import BackgroundTasks
from coordinator.partitioning import partition_for
from coordinator.txn.coordinator import (
    NeedProducerId,
    Reply,
    TxnConfig,
    TxnCoordinator,
    Write,
)
from coordinator.txn.metadata import TopicPartition, TxnMetadata, TxnState
from protocol.api_keys import ApiKey
from protocol.coordinator_records import OFFSETS_TOPIC
from protocol.errors import ErrorCode
from protocol.messages import AddPartitionsToTxnRequest, WriteTxnMarkersRequest
from protocol.records import build_tail_batch, kv_record_tail
from protocol.txn_records import TXN_TOPIC, decode, encode_key, encode_value
from protocol.types import DecodeError
from storage.log import FencedError, Log
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog, replay_batches

if TYPE_CHECKING:
    from broker.cluster_view import ClusterView
    from broker.dataplane.store import TopicStore
    from broker.group_runtime import GroupRuntime, LeasedOpener
    from broker.peers import PeerClients

log = logging.getLogger("kcoord.txn")

MARKER_RETRY_S = 0.1
MARKER_RETRY_MAX_S = 5.0
COMPACTION_INTERVAL_S = 60.0
PARTITION_CACHE_SIZE = 100_000
# Markers that can never be written: the partition is gone, or a newer epoch ended the
# producer's transaction there already.
_MARKER_DONE = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH)
# A transactional id's coordinator that cannot answer yet (its partition moves or loads).
_COORDINATOR_MOVING = (
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.CONCURRENT_TRANSACTIONS,
)
# Cluster mode: the partition is led (or coordinated) by another node.
_NOT_HERE = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR)


class MarkerNotWritten(Exception):
    """A marker another node could not write yet: retried."""


Opener = Callable[[Path, LogConfig], PartitionLog]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def txn_config(cfg: Any) -> TxnConfig:
    return TxnConfig(
        max_timeout_ms=cfg.get("transaction.max.timeout.ms"),
        id_expiration_ms=cfg.get("transactional.id.expiration.ms"),
        transaction_version=cfg.get("transaction.version"),
    )


class _Turn:
    """The lock that orders one transactional id's decisions, and how many hold or await it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class TxnRuntime:
    def __init__(
        self,
        data_dir: Path,
        cfg: Any,
        open_log: Opener | None,
        groups: GroupRuntime,
        data: TopicStore,
        *,
        open_leased: LeasedOpener | None = None,
        view: ClusterView | None = None,
        peers: PeerClients | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.partitions: int = cfg.get("transaction.state.log.num.partitions")
        self.config = txn_config(cfg)
        self.log_config = LogConfig(
            segment_bytes=cfg.get("transaction.state.log.segment.bytes"),
            index_interval_bytes=cfg.get("log.index.interval.bytes"),
            cleanup_policy="compact",
            delete_retention_ms=cfg.get("log.cleaner.delete.retention.ms"),
        )
        self.abort_check_ms: int = cfg.get(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        )
        durability = cfg.durability
        # The file log unless the broker runs on another engine (as the group runtime).
        self.open_log: Opener = open_log or (lambda path, c: Log.open(path, c, durability))
        self.groups = groups
        self.data = data
        self.coordinators = [TxnCoordinator(self.config) for _ in range(self.partitions)]
        self.logs: list[PartitionLog | None] = [None] * self.partitions
        # Cluster mode: the partitions this node's leases give it (partition -> fencing
        # epoch), loaded by ``take``; markers for partitions led elsewhere go to their leader.
        self.open_leased = open_leased
        self.owned: dict[int, int] | None = None if open_leased is None else {}
        self.view = view
        self.peers = peers
        # Called with a partition whose write was fenced (another node holds it now).
        self.on_fenced: Callable[[int], None] | None = None
        # Cluster mode: LeaseKeeper.valid (requests are refused while this node's leases may
        # have expired).
        self.lease_valid: Callable[[int], bool] | None = None
        self.loaded = asyncio.Event()
        self.health = [PartitionHealth() for _ in range(self.partitions)]
        self._tasks = BackgroundTasks(log, "transaction runtime")
        self._partition_cache: dict[str, int] = {}
        self._turns: dict[str, _Turn] = {}  # transactional id -> its turn (_decide)
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.owned is None:
            self._tasks.spawn(self._load_all())
        else:  # cluster mode: the node's leases decide what to load (take)
            self.loaded.set()
            self._tasks.spawn(self._expiry_loop())
            self._tasks.spawn(self._compaction_loop())

    async def take(self, p: int, epoch: int) -> None:
        """Cluster mode: this node acquired partition ``p``'s lease under ``epoch``: load it
        (retrying while it stays this node's) and finish the transactions found prepared."""
        assert self.owned is not None and self.open_leased is not None
        self.owned[p] = epoch
        delay = 0.1
        while self.owned.get(p) == epoch and not self._closed:
            coord = TxnCoordinator(self.config)
            try:
                plog = await self.open_leased(TXN_TOPIC, p, self.log_config, epoch)
            except FencedError:
                log.warning("%s-%d: fenced while loading; giving it up", TXN_TOPIC, p)
                self._fenced(p, epoch)
                return
            except Exception as e:
                log.warning("loading %s-%d failed (%s); retrying in %.1fs", TXN_TOPIC, p, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            try:
                await self._replay_into(coord, p, plog)
            except Exception as e:
                await plog.close()
                log.warning("replaying %s-%d failed (%s); retrying", TXN_TOPIC, p, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            if self.owned.get(p) != epoch:
                await plog.close()  # given up while it loaded
                return
            self.coordinators[p], self.logs[p] = coord, plog
            for tid in coord.to_complete():
                self._tasks.spawn(self._complete_in_turn(p, tid))
            return

    def give_up(self, p: int) -> Coroutine[Any, Any, None]:
        """Cluster mode: stop coordinating partition ``p`` (a handoff or a lost lease), at
        once: requests get NOT_COORDINATOR from this call on; the returned coroutine closes the
        log."""
        assert self.owned is not None
        self.owned.pop(p, None)
        plog, self.logs[p] = self.logs[p], None
        self.coordinators[p] = TxnCoordinator(self.config)
        return self._close_given_up(p, plog)

    async def _close_given_up(self, p: int, plog: Any) -> None:
        if plog is not None:
            try:
                await plog.close()
            except Exception as e:  # it may have failed (fenced): nothing more to do with it
                log.debug("closing %s-%d on give-up: %s", TXN_TOPIC, p, e)

    def _fenced(self, p: int, epoch: int) -> None:
        if self.owned is not None and self.owned.get(p) == epoch:
            del self.owned[p]
            if self.on_fenced is not None:
                self.on_fenced(p)

    async def _load_all(self) -> None:
        """Every partition on its own (a damaged one is quarantined or retried without holding
        the others back, as the group runtime's), then the timers."""
        counts = await asyncio.gather(*(self._load_partition(p) for p in range(self.partitions)))
        self.loaded.set()
        log.info(
            "loaded %d partitions of %s (%d transactional ids)",
            self.partitions,
            TXN_TOPIC,
            sum(counts),
        )
        self._tasks.spawn(self._expiry_loop())
        self._tasks.spawn(self._compaction_loop())

    async def _load_partition(self, p: int) -> int:
        name = f"{TXN_TOPIC}-{p}"
        loop = asyncio.get_running_loop()

        async def attempt() -> int:
            plog = await loop.run_in_executor(
                None, self.open_log, self.data_dir / name, self.log_config
            )
            coord = TxnCoordinator(self.config)
            try:
                await self._replay_into(coord, p, plog)
            except BaseException:
                await plog.close()  # a retry opens it again
                raise
            self.coordinators[p], self.logs[p] = coord, plog
            for tid in coord.to_complete():
                self._tasks.spawn(self._complete_in_turn(p, tid))
            return len(coord.txns)

        return await load_until_served(name, self.data_dir / name, attempt, self.health[p])

    async def _replay_into(self, coord: TxnCoordinator, p: int, plog: PartitionLog) -> None:
        async for chunk in replay_batches(plog):
            for header, records in chunk:
                if header.is_control:
                    continue
                for record in records:
                    if record[2] is None:
                        continue
                    try:
                        tid, value = decode(record[2], record[3])
                    except DecodeError as e:
                        log.warning("%s-%d: skipping undecodable record: %s", TXN_TOPIC, p, e)
                        continue
                    coord.replay(tid, None if value is None else TxnMetadata.from_value(tid, value))

    async def close(self) -> None:
        self._closed = True
        await asyncio.gather(*self._tasks.cancel(), return_exceptions=True)
        for plog in self.logs:
            if plog is not None:
                await plog.close()

    # -- requests ----------------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        p = self._partition_cache.get(transactional_id)
        if p is None:
            if len(self._partition_cache) >= PARTITION_CACHE_SIZE:
                self._partition_cache.clear()
            p = partition_for(transactional_id, self.partitions)
            # Java's String.hashCode in Python costs ~18 us; every request asks.
            self._partition_cache[transactional_id] = p
        return p

    def _coordinator(self, transactional_id: str) -> tuple[int, TxnCoordinator | None]:
        p = self.partition_of(transactional_id)
        if self.logs[p] is None or (self.lease_valid is not None and not self.lease_valid(p)):
            return p, None
        return p, self.coordinators[p]

    def _unavailable(self, p: int) -> Reply:
        """Loading here, or (cluster mode) coordinated by another node, or this node's lease
        possibly expired (it is about to be given up)."""
        if self.lease_valid is not None and not self.lease_valid(p):
            return Reply(ErrorCode.NOT_COORDINATOR)
        if self.owned is None or p in self.owned:
            return Reply(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return Reply(ErrorCode.NOT_COORDINATOR)

    async def init_producer_id(
        self, tid: str, timeout_ms: int, expected_pid: int, expected_epoch: int
    ) -> Reply:
        def decide(coord: TxnCoordinator, now: int, fresh: int | None) -> Any:
            return coord.init_producer_id(tid, timeout_ms, expected_pid, expected_epoch, now, fresh)

        return await self._decide(tid, decide)

    async def add_partitions(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        client_version: int = 0,
    ) -> Reply:
        """Add partitions to the producer's transaction: AddPartitionsToTxn / AddOffsetsToTxn
        (``client_version`` 0), or the implicit add of transactions version 2 (2)."""
        wanted = list(partitions)
        return await self._decide(
            tid,
            lambda coord, now, _: coord.add_partitions(
                tid, producer_id, epoch, wanted, now, client_version
            ),
        )

    def is_local(self, tid: str) -> bool:
        """Whether this node coordinates ``tid`` (always, outside cluster mode)."""
        return self.owned is None or self.partition_of(tid) in self.owned

    async def add_remote(
        self, tid: str, producer_id: int, epoch: int, partition: TopicPartition
    ) -> ErrorCode:
        """The implicit add of a transactions version 2 write, asked of the node that
        coordinates ``tid`` (AddPartitionsToTxn v5, not verify_only, as Kafka's leaders ask);
        NOT_ENOUGH_REPLICAS while it cannot answer."""
        return await self._ask_remote(tid, producer_id, epoch, partition, verify_only=False)

    def verify(
        self, tid: str, producer_id: int, epoch: int, partition: TopicPartition
    ) -> ErrorCode | None:
        """Whether a transactional write to ``partition`` is in the producer's ongoing
        transaction (KIP-890's verification); None when another node coordinates ``tid``
        (cluster mode): ask it with ``verify_remote``."""
        p, coord = self._coordinator(tid)
        if coord is None:
            if self.owned is not None and p not in self.owned:
                return None
            return ErrorCode.NOT_ENOUGH_REPLICAS  # loading here: retriable for every client
        return coord.verify(tid, producer_id, epoch, partition)

    async def verify_remote(
        self, tid: str, producer_id: int, epoch: int, partition: TopicPartition
    ) -> ErrorCode:
        """``verify`` asked of the node that coordinates ``tid``, with AddPartitionsToTxn v4
        verify_only as Kafka's leaders ask. While that node cannot answer: NOT_ENOUGH_REPLICAS,
        which every producer retries (Kafka's answer too)."""
        return await self._ask_remote(tid, producer_id, epoch, partition, verify_only=True)

    async def _ask_remote(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        partition: TopicPartition,
        *,
        verify_only: bool,
    ) -> ErrorCode:
        assert self.view is not None and self.peers is not None
        node, _ = self.view.leader(TXN_TOPIC, self.partition_of(tid))
        address = self.view.address(node, ("", -1)) if node >= 0 else None
        if address is None or node == self.view.self_id:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        A = AddPartitionsToTxnRequest
        req = A(
            transactions=[
                A.AddPartitionsToTxnTransaction(
                    transactional_id=tid,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    verify_only=verify_only,
                    topics=[
                        A.AddPartitionsToTxnTopic(name=partition[0], partitions=[partition[1]])
                    ],
                )
            ]
        )
        try:
            version = 4 if verify_only else 5  # v5: an add of transactions version 2
            resp = await self.peers.request(address, ApiKey.ADD_PARTITIONS_TO_TXN, version, req)
            code = ErrorCode(
                resp.results_by_transaction[0]
                .topic_results[0]
                .results_by_partition[0]
                .partition_error_code
            )
        except Exception as e:  # noqa: BLE001 - unreachable, or an answer without a result
            log.warning("verifying %s's write to %s-%d with node %d: %s", tid, *partition, node, e)
            return ErrorCode.NOT_ENOUGH_REPLICAS
        if resp.error_code or code in _COORDINATOR_MOVING:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return code

    async def end_txn(
        self, tid: str, producer_id: int, epoch: int, commit: bool, client_version: int = 0
    ) -> Reply:
        """EndTxn; ``client_version`` 2 (v5) bumps the epoch, and the reply names the producer
        id and epoch to go on with."""
        return await self._decide(
            tid,
            lambda coord, now, fresh: coord.end_txn(
                tid, producer_id, epoch, commit, now, client_version, fresh
            ),
        )

    def describe(self, tid: str) -> TxnMetadata | None | ErrorCode:
        p, coord = self._coordinator(tid)
        if coord is None:
            return ErrorCode(self._unavailable(p).error)
        return coord.describe(tid)

    def listing(
        self, states: set[TxnState], producer_ids: set[int], min_duration_ms: int
    ) -> list[TxnMetadata]:
        now = now_ms()
        out: list[TxnMetadata] = []
        for p, coord in enumerate(self.coordinators):
            if self.logs[p] is not None:
                out.extend(coord.listing(states, producer_ids, min_duration_ms, now))
        return out

    # -- writing -------------------------------------------------------------------------------

    async def _decide(
        self, tid: str, decide: Callable[[TxnCoordinator, int, int | None], Any]
    ) -> Reply:
        """One decision about ``tid``, taken in its turn: the requests of one transactional
        id are decided one after another, each after the previous one's records are durable
        (and a transaction's end after its markers and completion). Kafka answers a request
        that arrives while a write is in flight CONCURRENT_TRANSACTIONS and the client retries
        after a backoff; waiting here gives the same answer without the round trips (a
        producer sends AddOffsetsToTxn while its AddPartitionsToTxn is being written).

        The end of a transaction is answered once its markers are durable; its completion
        record, which a restart redoes from the prepared state, is written after and holds
        the id's turn (the producer's next request), not the reply."""
        p, coord = self._coordinator(tid)
        if coord is None:
            return self._unavailable(p)
        turn = await self._acquire(tid)
        held = True
        try:
            fresh: int | None = None
            while True:
                outcome = decide(coord, now_ms(), fresh)
                if not isinstance(outcome, NeedProducerId):
                    break
                fresh = await self.data.allocate_producer_id()
            reply, rest = await self._run(p, outcome)
            if rest is not None:
                held = False
                rest.add_done_callback(lambda _: self._release(tid, turn))
            return reply
        finally:
            if held:
                self._release(tid, turn)

    async def _acquire(self, tid: str) -> _Turn:
        turn = self._turns.get(tid)
        if turn is None:
            turn = self._turns[tid] = _Turn()
        turn.users += 1
        try:
            await turn.lock.acquire()
        except BaseException:
            turn.users -= 1
            if not turn.users:
                del self._turns[tid]
            raise
        return turn

    def _release(self, tid: str, turn: _Turn) -> None:
        turn.lock.release()
        turn.users -= 1
        if not turn.users:
            del self._turns[tid]  # nobody holds or waits for it: forget it

    @contextlib.asynccontextmanager
    async def _turn(self, tid: str) -> AsyncIterator[None]:
        turn = await self._acquire(tid)
        try:
            yield
        finally:
            self._release(tid, turn)

    async def _run(self, p: int, outcome: Reply | Write) -> tuple[Reply, asyncio.Task | None]:
        """Carry out a decision (in its id's turn): its reply, and the completion of a
        transaction still being written (the turn is the id's until it is done)."""
        if isinstance(outcome, Reply):
            return outcome, None
        if not await self._write(p, outcome):
            return Reply(ErrorCode.NOT_COORDINATOR), None
        rest = None
        if outcome.markers:
            tid = outcome.transactional_id
            if not outcome.reply_when_complete:
                # A coordinator's own abort (a new incarnation fencing the open transaction):
                # the reply needs none of it.
                rest = self._tasks.spawn(self._complete(p, tid))
            elif await self._markers(p, tid):
                rest = self._tasks.spawn(self._finish(p, tid))
        return outcome.reply or Reply(), rest

    async def _write(self, p: int, write: Write) -> bool:
        """Persist one decision; True once it is durable and applied."""
        coord = self.coordinators[p]
        plog = self.logs[p]
        if plog is None:
            return False
        coord.begin(write)
        target = write.target
        value = None if target is None else encode_value(target.to_value(), target.record_version)
        batch = build_tail_batch([kv_record_tail(encode_key(write.transactional_id), value)])
        try:
            await plog.append(batch, built_here=True)
        except Exception as e:
            log.error("writing %s-%d failed: %s", TXN_TOPIC, p, e)
            coord.fail(write)
            if isinstance(e, FencedError) and self.owned is not None and p in self.owned:
                self._fenced(p, self.owned[p])
                self._tasks.spawn(self.give_up(p))
            elif self.logs[p] is plog:
                # The log takes no more writes: reopen it (recovery keeps whole batches) and
                # replay; requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile.
                self.logs[p] = None
                self._tasks.spawn(self._reload(p, plog))
            return False
        coord.finish(write)
        return True

    async def _reload(self, p: int, failed: PartitionLog) -> None:
        try:
            await failed.close()
        except Exception as e:  # it failed already; what matters is the reopen
            log.debug("closing failed %s-%d: %s", TXN_TOPIC, p, e)
        if self.owned is None:
            await self._load_partition(p)
        elif (epoch := self.owned.get(p)) is not None:
            await self.take(p, epoch)
        log.warning("reloaded %s-%d after a failed write", TXN_TOPIC, p)

    async def _complete_in_turn(self, p: int, tid: str) -> None:
        async with self._turn(tid):
            await self._complete(p, tid)

    async def _complete(self, p: int, tid: str) -> None:
        """Write the markers of ``tid``'s prepared transaction, then its completion."""
        if await self._markers(p, tid):
            await self._finish(p, tid)

    async def _markers(self, p: int, tid: str) -> bool:
        """The markers of ``tid``'s prepared transaction, durable in every partition; False
        if it is not prepared (nothing to complete)."""
        meta = self.coordinators[p].txns.get(tid)
        if meta is None or meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return False
        await self._write_markers(meta, meta.state == TxnState.PREPARE_COMMIT, coordinator_epoch=0)
        return True

    async def _finish(self, p: int, tid: str) -> None:
        """The completion of ``tid``'s transaction, whose markers are durable. A failed
        write reloads the partition, whose load completes the transaction again (this one
        then stops, releasing the id's turn to it)."""
        coord = self.coordinators[p]
        done = coord.complete(tid, now_ms())
        if done is not None:
            await self._write(p, done)

    async def _write_markers(self, meta: TxnMetadata, commit: bool, coordinator_epoch: int) -> None:
        """A marker in every partition of the transaction, retried until each is written
        (or can never be: a deleted partition)."""
        todo = set(meta.partitions)
        delay = MARKER_RETRY_S
        while todo and not self._closed:
            waits: list[tuple[TopicPartition, Awaitable[Any]]] = []
            for tp in sorted(todo):
                result = self._marker(
                    tp,
                    meta.producer_id,
                    meta.producer_epoch,
                    commit,
                    coordinator_epoch,
                    meta.client_version,
                )
                if isinstance(result, ErrorCode):
                    if result in _MARKER_DONE:
                        todo.discard(tp)
                    continue
                waits.append((tp, result))
            outcomes = await asyncio.gather(*(w for _, w in waits), return_exceptions=True)
            for (tp, _), outcome in zip(waits, outcomes, strict=True):
                if not isinstance(outcome, BaseException):
                    todo.discard(tp)
            if todo:
                log.warning(
                    "transaction %s: %d marker(s) not written yet, retrying in %.1fs",
                    meta.transactional_id,
                    len(todo),
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MARKER_RETRY_MAX_S)

    def _marker(
        self,
        tp: TopicPartition,
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        version: int = 0,
    ) -> Awaitable[Any] | ErrorCode:
        local = self._local_marker(tp, pid, epoch, commit, coordinator_epoch, version)
        if self.view is None or local not in _NOT_HERE:
            return local
        return self._remote_marker(tp, pid, epoch, commit, coordinator_epoch, version)

    async def _remote_marker(
        self,
        tp: TopicPartition,
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        version: int = 0,
    ) -> None:
        """WriteTxnMarkers to the node that leads ``tp`` (raises while it cannot be
        written there, so the caller retries)."""
        assert self.view is not None and self.peers is not None
        topic, index = tp
        node, _ = self.view.leader(topic, index)
        address = self.view.address(node, ("", -1)) if node >= 0 else None
        if address is None or node == self.view.self_id:
            raise MarkerNotWritten(f"{topic}-{index} has no leader yet")
        W = WriteTxnMarkersRequest
        req = W(
            markers=[
                W.WritableTxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    transaction_result=commit,
                    topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[index])],
                    coordinator_epoch=coordinator_epoch,
                    transaction_version=version,
                )
            ]
        )
        # v2 (KIP-1228) carries the transaction version; a version 1 transaction keeps v1,
        # which a node not yet upgraded understands.
        request_version = 2 if version >= 2 else 1
        resp = await self.peers.request(address, ApiKey.WRITE_TXN_MARKERS, request_version, req)
        code = resp.markers[0].topics[0].partitions[0].error_code
        if code != ErrorCode.NONE and code not in _MARKER_DONE:
            raise MarkerNotWritten(f"{topic}-{index} on node {node}: error {code}")

    def _local_marker(
        self,
        tp: TopicPartition,
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        version: int = 0,
    ) -> Awaitable[Any] | ErrorCode:
        topic, index = tp
        if topic == OFFSETS_TOPIC:
            return self.groups.write_marker(index, pid, epoch, commit, coordinator_epoch)
        part = self.data.partition(topic, index)
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        error, durable = part.append_marker(
            pid, epoch, commit, coordinator_epoch, now_ms(), version
        )
        if error != ErrorCode.NONE:
            return ErrorCode(error)
        if durable is None:
            return asyncio.sleep(0)
        return durable

    # -- time ----------------------------------------------------------------------------------

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.abort_check_ms / 1000)
            self.expire(now_ms())

    def expire(self, now: int) -> int:
        """Abort timed-out transactions and remove expired ids (each in its id's turn, where
        it is decided again); returns how many were found."""
        n = 0
        for p, coord in enumerate(self.coordinators):
            if self.logs[p] is None:
                continue
            for write in coord.expired(now):
                n += 1
                self._tasks.spawn(self._expire_in_turn(p, write.transactional_id))
        return n

    async def _expire_in_turn(self, p: int, tid: str) -> None:
        async with self._turn(tid):
            for write in self.coordinators[p].expired(now_ms(), only=tid):
                if write.target is not None:
                    log.info(
                        "aborting transaction %s: timed out after %d ms",
                        tid,
                        write.target.timeout_ms,
                    )
                _, rest = await self._run(p, write)
                if rest is not None:
                    await rest

    async def _compaction_loop(self) -> None:
        while True:
            await asyncio.sleep(COMPACTION_INTERVAL_S)
            for p, plog in enumerate(self.logs):
                if plog is None:
                    continue
                try:
                    await plog.compact(now_ms())
                except Exception:
                    log.exception("compaction of %s-%d failed", TXN_TOPIC, p)
