"""The transaction coordinator on the partition runtime: the `__transaction_state` logs and
the markers.

Each of the `transaction.state.log.num.partitions` partitions served here has its log
(compacted, in the data directory or the storage engine, like `__consumer_offsets`) and a pure
`coordinator.txn.TxnCoordinator` replayed from it (`broker/partition_runtime.py` loads,
reloads and gives them up). A transactional id lives in partition
`Utils.abs(hashCode) % partitions`, Kafka's rule.

A decision's record is written and made durable before its reply goes out; while it is in
flight the id is pending (CONCURRENT_TRANSACTIONS to anything else it is asked). Ending a
transaction writes PrepareCommit/PrepareAbort, then a marker to every partition of the
transaction (topic partitions through the data plane, `__consumer_offsets` partitions through
the group runtime, which commits or drops the pending offsets), then CompleteCommit /
CompleteAbort. EndTxn is answered once the markers are durable: the completion, which a
load redoes from the prepared state, holds the id's next request instead of the reply. A
transaction found prepared when its partition loads (a restart, a reload after a failed
write, a partition taken over from another node) is completed the same way.
Timed-out transactions are aborted under a bumped epoch (fencing their producer), and ids
unused for `transactional.id.expiration.ms` are removed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Hashable,
    Iterable,
    Iterator,
)
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from broker.loading import PartitionHealth
from broker.ownership import LeasedOpener, Leases, LogOpener, Ownership, SoleOwner
from broker.partition_runtime import PartitionRuntime, now_ms
from coordinator.partitioning import partition_for
from coordinator.txn.coordinator import (
    OK,
    NeedProducerId,
    Reply,
    TxnConfig,
    TxnCoordinator,
    Write,
)
from coordinator.txn.metadata import PREPARED, TopicPartition, TxnMetadata, TxnState
from protocol.api_keys import ApiKey
from protocol.coordinator_records import OFFSETS_TOPIC
from protocol.errors import ErrorCode
from protocol.messages import AddPartitionsToTxnRequest, WriteTxnMarkersRequest
from protocol.records import BatchHeader, RecordTuple, build_tail_batch, kv_record_tail
from protocol.txn_records import TXN_TOPIC, decode, encode_key, encode_value
from protocol.types import DecodeError
from storage.log import Log
from storage.logconfig import LogConfig

if TYPE_CHECKING:
    from broker.cluster.peers import PeerClients
    from broker.cluster.view import ClusterView
    from broker.config import Config
    from broker.dataplane.store import TopicStore
    from broker.group_runtime import GroupRuntime

log = logging.getLogger("kcoord.txn")

T = TypeVar("T")

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


def txn_config(cfg: Config) -> TxnConfig:
    return TxnConfig(
        max_timeout_ms=cfg.get("transaction.max.timeout.ms"),
        id_expiration_ms=cfg.get("transactional.id.expiration.ms"),
        transaction_version=cfg.get("transaction.version"),
    )


class _Turn:
    """The lock that orders one transactional id's decisions, and how many hold or await it.

    A turn held by writes chained by callbacks (`TxnRuntime._join`: a decided add, or the
    completion of an EndTxn answered already) has ``top``, the state they move the id to, and
    ``chain``, what waits for them, in order: adds of the same producer are decided on top
    of that state and join the chain (their records go to the same log, after it, in the
    same flush when they can) instead of waiting for the turn."""

    __slots__ = ("lock", "users", "top", "chain", "ok")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0
        self.top: TxnMetadata | None = None
        self.chain: collections.deque[_Link] | None = None
        self.ok = True  # no write of the chain failed


class _Completion(NamedTuple):
    """The completion of a transaction being written: its write's future, the decision and
    the coordinator it is applied to."""

    fut: asyncio.Future
    write: Write
    coord: TxnCoordinator


class _Link(NamedTuple):
    """One step of a turn's chain: a write in flight (``fut``; None: a reply that only waits
    for the steps before it), the decision it carries out (applied to ``coord`` once it and
    every step before are durable; None: nothing to apply), and its answer (None: nobody
    waits for one, as for a completion)."""

    fut: asyncio.Future | None
    write: Write | None
    coord: TxnCoordinator | None
    answer: Callable[[Reply], object] | None
    reply: Reply


@functools.lru_cache(maxsize=PARTITION_CACHE_SIZE)
def _record_key(transactional_id: str) -> bytes:
    """The id's `__transaction_state` record key: the same bytes at every write of it."""
    return encode_key(transactional_id)


def _take_free(lock: asyncio.Lock) -> None:
    """Acquire a lock nobody holds or awaits, from synchronous code: its ``acquire`` returns
    without suspending then."""
    acquiring = lock.acquire()
    try:
        acquiring.send(None)
    except StopIteration:
        return
    acquiring.close()
    raise RuntimeError("the lock was not free")


class TxnFold:
    """A `TxnCoordinator` rebuilt from its partition's records (the newest per id wins)."""

    def __init__(self, coord: TxnCoordinator, name: str) -> None:
        self.state = coord
        self.name = name

    def replay(self, header: BatchHeader, records: list[RecordTuple]) -> None:
        if header.is_control:
            return
        coord = self.state
        for record in records:
            if record[2] is None:
                continue
            try:
                tid, value = decode(record[2], record[3])
            except DecodeError as e:
                log.warning("%s: skipping undecodable record: %s", self.name, e)
                continue
            coord.replay(tid, None if value is None else TxnMetadata.from_value(tid, value))

    def finish(self) -> Iterator[None]:
        return iter(())


class TxnRuntime:
    """The transaction coordinator on its `PartitionRuntime`: a `TxnCoordinator` per
    `__transaction_state` partition served here."""

    def __init__(
        self,
        data_dir: Path,
        cfg: Config,
        open_log: LogOpener | None,
        groups: GroupRuntime,
        data: TopicStore,
        *,
        open_leased: LeasedOpener | None = None,
        ownership: Ownership | None = None,
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
        opener: LogOpener = open_log or (lambda path, c: Log.open(path, c, durability))
        if ownership is None:
            ownership = (
                SoleOwner(self.data_dir, opener) if open_leased is None else Leases(open_leased)
            )
        self.ownership = ownership
        self.runtime: PartitionRuntime[TxnCoordinator] = PartitionRuntime(
            TXN_TOPIC,
            self.partitions,
            self,
            self.ownership.opener(TXN_TOPIC, self.log_config),
            data_dir=self.data_dir,
            log=log,
        )
        self.logs = self.runtime.logs
        self.loaded = self.runtime.loaded
        self.groups = groups
        self.data = data
        # Markers for partitions led by another node go to it (WriteTxnMarkers), and so do
        # verifications of writes to partitions led here of ids another node coordinates.
        self.view = view
        self.peers = peers
        self._partition_cache: dict[str, int] = {}
        self._turns: dict[str, _Turn] = {}  # transactional id -> its turn (_decide)
        self._completing: set[asyncio.Future] = set()  # completions written (_finish_later)
        self._closed = False
        self.ownership.adopt(self.runtime)

    @property
    def health(self) -> list[PartitionHealth]:
        h = self.runtime.health
        return [h.get(p) or PartitionHealth() for p in range(self.partitions)]

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.runtime.spawn(self._expiry_loop())
        self.runtime.spawn(self._compaction_loop())
        self.ownership.serve(self.runtime)

    async def take(self, p: int, epoch: int) -> None:
        """This node owns partition ``p`` under ``epoch``: load it (the transactions found
        prepared are then finished)."""
        await self.runtime.take(p, epoch)

    def give_up(self, p: int) -> Coroutine[object, None, None]:
        """Stop coordinating partition ``p`` (a handoff or a lost lease), at once: requests
        get NOT_COORDINATOR from this call on; the returned coroutine closes the log."""
        return self.runtime.give_up(p, flush=False)

    async def close(self) -> None:
        self._closed = True
        for fut in list(self._completing):
            fut.cancel()  # as the runtime's close cancels its tasks
        await self.runtime.close()

    # -- the coordinator's part of the runtime ---------------------------------------------

    def fold(self, p: int) -> TxnFold:
        return TxnFold(TxnCoordinator(self.config), f"{TXN_TOPIC}-{p}")

    def on_loaded(self, p: int, coord: TxnCoordinator) -> None:
        for tid in coord.to_complete():
            self.runtime.spawn(self._complete_in_turn(p, tid))

    def on_unloaded(self, p: int, coord: TxnCoordinator) -> None:
        pass  # requests wait in their id's turn, not in the state: their writes fail

    def release(self, p: int, waiting: list[object], error: BaseException | None) -> None:
        pass  # every write is awaited by its decision (_write)

    def timer(self, p: int, coord: TxnCoordinator, key: Hashable) -> None:
        pass  # time is the expiry loop's

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
        return p, self.runtime.serving(p)

    def _unavailable(self, p: int) -> Reply:
        """Loading here, or coordinated by another node, or this node's lease possibly
        expired (it is about to be given up)."""
        return Reply(self.runtime.refusal(p))

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

    def add_partitions_now(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        then: Callable[[Reply], T],
    ) -> T | asyncio.Future[T]:
        """`add_partitions` (``client_version`` 0) answered through ``then``, without a task
        when nobody holds or awaits the id's turn (a producer's requests come one after
        another): decided at once, and a write's answer is a future completed by the
        write's callback, which applies the record and gives the turn back. While the turn
        is held by a chain of writes only (the producer's previous add, or the completion of
        its last transaction), decided on top of them and answered after them (`_join`).
        Otherwise (or while the id's partition is unavailable) as `add_partitions`, in a
        task."""
        turn = self._turns.get(tid)
        if turn is not None:
            top = turn.top
            if top is not None and turn.users == 1:
                p, coord = self._coordinator(tid)
                outcome = (
                    None
                    if coord is None
                    else coord.add_partitions_on(top, producer_id, epoch, partitions, now_ms())
                )
                if outcome is not None:
                    assert coord is not None
                    return self._join(tid, turn, p, coord, outcome, then)
            return asyncio.ensure_future(
                self._then(self.add_partitions(tid, producer_id, epoch, partitions), then)
            )
        p, coord = self._coordinator(tid)
        if coord is None:
            return then(self._unavailable(p))
        outcome = coord.add_partitions(tid, producer_id, epoch, list(partitions), now_ms())
        if isinstance(outcome, Reply):
            return then(outcome)  # nothing in flight for the id: its turn is not needed
        turn = self._turns[tid] = _Turn()
        turn.users = 1
        _take_free(turn.lock)
        turn.chain = collections.deque()
        return self._join(tid, turn, p, coord, outcome, then)

    def _join(
        self,
        tid: str,
        turn: _Turn,
        p: int,
        coord: TxnCoordinator,
        outcome: Reply | Write,
        then: Callable[[Reply], T],
    ) -> asyncio.Future[T]:
        """Add a decision to the chain of ``turn`` (held by it): its record's write begins
        now; it is applied and answered once that write and every step before it are
        durable (NOT_COORDINATOR if one of them failed)."""
        out: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def answer(reply: Reply) -> None:
            if not out.done():  # cancelled: the client went away
                out.set_result(then(reply))

        chain = turn.chain
        assert chain is not None
        if isinstance(outcome, Reply):  # what the steps before decided already
            chain.append(_Link(None, None, coord, answer, outcome))
            return out
        started = self._begin_write(p, outcome, in_flush=True)
        if started is None:  # not reached: the partition is served (the callers' check)
            chain.append(_Link(None, None, coord, answer, Reply(ErrorCode.NOT_COORDINATOR)))
            if len(chain) == 1:
                self._advance(tid, turn)
            return out
        written, fut = started
        turn.top = outcome.target
        chain.append(_Link(fut, outcome, written, answer, outcome.reply or OK))
        fut.add_done_callback(lambda _: self._advance(tid, turn))
        return out

    def _advance(self, tid: str, turn: _Turn) -> None:
        """Carry out the steps of the chain of ``turn`` whose writes (and every one before)
        are done, in order; give the turn back once none is left."""
        chain = turn.chain
        if chain is None:
            return  # carried out to its end by an earlier callback (a shared flush future)
        while chain:
            fut, write, coord, answer, reply = chain[0]
            if fut is not None and not fut.done():
                return  # its own callback goes on
            chain.popleft()
            try:
                if fut is not None and (fut.cancelled() or fut.exception() is not None):
                    if turn.ok and not fut.cancelled():
                        log.error(
                            "writing %s-%d failed: %s",
                            TXN_TOPIC,
                            self.partition_of(tid),
                            fut.exception(),
                        )
                    turn.ok = False
                if not turn.ok:
                    reply = Reply(ErrorCode.NOT_COORDINATOR)
                else:
                    if write is not None and coord is not None:
                        coord.finish(write)
                    for later in reversed(chain):
                        if later.write is not None and later.coord is not None:
                            # Applying a state drops its pending mark: a later write
                            # still in flight sets it again.
                            later.coord.begin(later.write)
                            break
                if answer is not None:
                    answer(reply)
            except Exception:  # a bug: the turn must not stay taken for good
                log.exception("carrying out %s's decision", tid)
                turn.ok = False
        turn.chain = None
        turn.top = None
        self._release(tid, turn)

    @staticmethod
    async def _then(reply: Awaitable[Reply], then: Callable[[Reply], T]) -> T:
        return then(await reply)

    def is_local(self, tid: str) -> bool:
        """Whether this node coordinates ``tid`` (always, outside cluster mode)."""
        return self.partition_of(tid) in self.runtime.owned

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
        transaction (KIP-890's verification); None when another node coordinates ``tid``: ask
        it with ``verify_remote``."""
        p, coord = self._coordinator(tid)
        if coord is None:
            if p not in self.runtime.owned:
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

    def end_txn_now(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        client_version: int,
        then: Callable[[Reply], T],
    ) -> T | asyncio.Future[T]:
        """`end_txn` answered through ``then``, without tasks when nobody holds or awaits the
        id's turn (as `add_partitions_now`): decided at once, and the PrepareCommit's write,
        the markers and the completion are chained by their futures' callbacks (`_end_now`),
        holding the turn; the reply goes once the markers are durable. Otherwise (or when the
        decision needs a fresh producer id) as `end_txn`, in a task."""
        p, coord = self._coordinator(tid)
        outcome: Any = None
        if tid not in self._turns and coord is not None:
            outcome = coord.end_txn(tid, producer_id, epoch, commit, now_ms(), client_version)
            if isinstance(outcome, Reply):
                return then(outcome)  # nothing in flight for the id: its turn is not needed
        if not isinstance(outcome, Write) or not outcome.markers or not outcome.reply_when_complete:
            if coord is None:
                return then(self._unavailable(p))
            return asyncio.ensure_future(
                self._then(self.end_txn(tid, producer_id, epoch, commit, client_version), then)
            )
        turn = self._turns[tid] = _Turn()
        turn.users = 1
        _take_free(turn.lock)
        out: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def finished(reply: Reply, rest: _Completion | None) -> None:
            if rest is None:
                self._release(tid, turn)
            else:
                # The completion holds the turn: the producer's next adds join its chain,
                # which applies it (before them).
                fut, done, written = rest
                turn.top = done.target
                turn.chain = collections.deque([_Link(fut, done, written, None, OK)])
                fut.add_done_callback(lambda _: self._advance(tid, turn))
            if not out.done():  # cancelled: the client went away
                out.set_result(then(reply))

        self._end_now(p, outcome, finished)
        return out

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
        for _, coord in self.runtime.served():
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
        try:
            fresh: int | None = None
            while True:
                outcome = decide(coord, now_ms(), fresh)
                if not isinstance(outcome, NeedProducerId):
                    break
                fresh = await self.data.allocate_producer_id()
        except BaseException:
            self._release(tid, turn)
            raise
        if isinstance(outcome, Reply):
            self._release(tid, turn)
            return outcome
        # Carried out to its end in a task of its own, holding the id's turn, even if the
        # request's task is cancelled (its client went away): markers stopped half-way would
        # leave a prepared transaction that nothing completes until the partition reloads.
        job = self.runtime.spawn(self._run(p, outcome))

        def done(j: asyncio.Task) -> None:
            rest = None if j.cancelled() or j.exception() is not None else j.result()[1]
            if rest is None:
                self._release(tid, turn)
            else:
                rest.add_done_callback(lambda _: self._release(tid, turn))

        job.add_done_callback(done)
        reply, _ = await asyncio.shield(job)
        return reply

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

    async def _run(self, p: int, outcome: Write) -> tuple[Reply, asyncio.Future | None]:
        """Carry out a decision to write (in its id's turn): its reply, and the completion of
        a transaction still being written (the turn is the id's until it is done)."""
        if not await self._write(p, outcome):
            return Reply(ErrorCode.NOT_COORDINATOR), None
        rest: asyncio.Future | None = None
        if outcome.markers:
            tid = outcome.transactional_id
            if not outcome.reply_when_complete:
                # A coordinator's own abort (a new incarnation fencing the open transaction):
                # the reply needs none of it.
                rest = self.runtime.spawn(self._complete(p, tid))
            elif (coord := await self._markers(p, tid)) is not None:
                completion = self._finish_later(p, tid, coord)
                rest = None if completion is None else completion[0]
        return outcome.reply or OK, rest

    def _end_now(
        self,
        p: int,
        write: Write,
        finished: Callable[[Reply, _Completion | None], None],
    ) -> None:
        """`_run` for the end of a transaction (a write with markers, answered once they are
        durable), by callbacks: the record's write, then the markers (`_markers_now`), then
        the completion (`_finish_later`). ``finished(reply, rest)`` is called once, with the
        completion's future (None when there is none); it gives the turn back."""
        started = self._begin_write(p, write, in_flush=True)
        if started is None:
            finished(Reply(ErrorCode.NOT_COORDINATOR), None)
            return
        written, fut = started

        def prepared(f: asyncio.Future) -> None:
            if f.cancelled() or f.exception() is not None:
                if not f.cancelled():
                    log.error("writing %s-%d failed: %s", TXN_TOPIC, p, f.exception())
                finished(Reply(ErrorCode.NOT_COORDINATOR), None)
                return
            try:
                written.finish(write)
                self._markers_now(p, write.transactional_id, write.reply or OK, finished)
            except Exception:  # a bug: the turn must not stay taken for good
                log.exception("ending %s's transaction", write.transactional_id)
                finished(Reply(ErrorCode.NOT_COORDINATOR), None)

        fut.add_done_callback(prepared)

    def _markers_now(
        self,
        p: int,
        tid: str,
        reply: Reply,
        finished: Callable[[Reply, _Completion | None], None],
    ) -> None:
        """`_markers` and `_finish_later` by callbacks while every marker is a local write
        in flight; a marker to retry or to ask another node for goes on in a task
        (`_write_markers`), as `_run` does."""
        coord = self.runtime.states[p]
        meta = None if coord is None else coord.txns.get(tid)
        if coord is None or meta is None or meta.state not in PREPARED:
            finished(reply, None)  # not prepared, or unloaded: a load completes it
            return
        if self._closed:
            finished(Reply(ErrorCode.NOT_COORDINATOR), None)
            return
        commit = meta.state == TxnState.PREPARE_COMMIT
        todo = set(meta.partitions)
        waits = self._issue_markers(meta, commit, 0, todo)
        left = len(waits)

        def after_markers() -> None:
            try:
                rest = self._finish_later(p, tid, coord, apply=False)
            except Exception:  # a bug: the completion is redone when the partition loads
                log.exception("completing %s's transaction", tid)
                rest = None
            finished(reply, rest)

        def in_task(retry: bool, started: list[tuple[TopicPartition, Awaitable[object]]]) -> None:
            async def rest() -> None:
                if retry:
                    log.warning(
                        "transaction %s: %d marker(s) not written yet, retrying in %.1fs",
                        tid,
                        len(todo),
                        MARKER_RETRY_S,
                    )
                    await asyncio.sleep(MARKER_RETRY_S)
                await self._write_markers(meta, commit, 0, todo, started)

            def done(t: asyncio.Task) -> None:
                if t.cancelled() or t.exception() is not None:
                    finished(Reply(ErrorCode.NOT_COORDINATOR), None)
                else:
                    after_markers()

            self.runtime.spawn(rest()).add_done_callback(done)

        if len(todo) > left or not all(isinstance(w, asyncio.Future) for _, w in waits):
            in_task(False, waits)  # an error to retry, or a marker sent to another node
            return
        if not waits:
            after_markers()
            return

        def one(tp: TopicPartition, f: asyncio.Future) -> None:
            nonlocal left
            if not f.cancelled() and f.exception() is None:
                todo.discard(tp)
            left -= 1
            if left:
                return
            if not todo:
                after_markers()
            elif self._closed:
                finished(Reply(ErrorCode.NOT_COORDINATOR), None)
            else:
                in_task(True, [])

        for tp, w in waits:
            cast(asyncio.Future, w).add_done_callback(functools.partial(one, tp))

    async def _write(self, p: int, write: Write) -> bool:
        """Persist one decision; True once it is durable and applied. The id is pending
        while its record is written (requests about it meanwhile get
        CONCURRENT_TRANSACTIONS); a failed write is never applied: the runtime reloads the
        partition from its log (or gives it up, fenced), and the caller answers
        NOT_COORDINATOR."""
        started = self._begin_write(p, write)
        if started is None:
            return False
        coord, fut = started
        try:
            await fut
        except Exception as e:
            log.error("writing %s-%d failed: %s", TXN_TOPIC, p, e)
            return False
        coord.finish(write)
        return True

    def _begin_write(
        self, p: int, write: Write, *, in_flush: bool = False
    ) -> tuple[TxnCoordinator, asyncio.Future] | None:
        """Mark the id pending and append the decision's record: the coordinator and the
        append's future (None if ``p`` is not served). ``in_flush``: the future is the whole
        flush's (`PartitionRuntime.write`), for a caller that only adds callbacks to it: no
        future, shield and callbacks of its own per write; never to be awaited or cancelled."""
        coord = self.runtime.states[p]
        if coord is None:
            return None
        coord.begin(write)
        target = write.target
        value = None if target is None else encode_value(target.to_value(), target.record_version)
        batch = build_tail_batch([kv_record_tail(_record_key(write.transactional_id), value)])
        if in_flush:
            return coord, self.runtime.write(p, batch)
        return coord, self.runtime.append(p, batch)

    def _finish_later(
        self, p: int, tid: str, coord: TxnCoordinator, *, apply: bool = True
    ) -> _Completion | None:
        """`_finish` without a task of its own (one per transaction): the completion's record
        is appended now and applied by a callback once durable (``apply``; else by the
        caller, a turn's chain, in order with what follows it); the returned future holds
        the id's turn. A failed write is left to the runtime's reload, as in `_write`."""
        done = coord.complete(tid, now_ms()) if self.runtime.states[p] is coord else None
        if done is None:
            return None
        started = self._begin_write(p, done)
        if started is None:
            return None
        written, fut = started

        def applied(f: asyncio.Future) -> None:
            if f.cancelled():
                return
            e = f.exception()
            if e is not None:
                log.error("writing %s-%d failed: %s", TXN_TOPIC, p, e)
                return
            written.finish(done)

        if apply:
            # Registered before the caller's release of the turn: the next request of the
            # id sees the completed state.
            fut.add_done_callback(applied)
        self._completing.add(fut)
        fut.add_done_callback(self._completing.discard)
        return _Completion(fut, done, written)

    async def _complete_in_turn(self, p: int, tid: str) -> None:
        async with self._turn(tid):
            await self._complete(p, tid)

    async def _complete(self, p: int, tid: str) -> None:
        """Write the markers of ``tid``'s prepared transaction, then its completion."""
        coord = await self._markers(p, tid)
        if coord is not None:
            await self._finish(p, tid, coord)

    async def _markers(self, p: int, tid: str) -> TxnCoordinator | None:
        """The markers of ``tid``'s prepared transaction, durable in every partition: the
        coordinator that holds it, or None if it is not prepared (nothing to complete) or
        its partition is not served here."""
        coord = self.runtime.states[p]
        if coord is None:
            return None
        meta = coord.txns.get(tid)
        if meta is None or meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return None
        await self._write_markers(meta, meta.state == TxnState.PREPARE_COMMIT, coordinator_epoch=0)
        return coord

    async def _finish(self, p: int, tid: str, coord: TxnCoordinator) -> None:
        """The completion of ``tid``'s transaction, whose markers are durable in ``coord``.
        A partition reloaded meanwhile (or after this write fails) completes the
        transaction again when it loads, in the id's turn after this one: this one stops."""
        done = coord.complete(tid, now_ms()) if self.runtime.states[p] is coord else None
        if done is not None:
            await self._write(p, done)

    async def _write_markers(
        self,
        meta: TxnMetadata,
        commit: bool,
        coordinator_epoch: int,
        todo: set[TopicPartition] | None = None,
        started: list[tuple[TopicPartition, Awaitable[object]]] | None = None,
    ) -> None:
        """A marker in every partition of the transaction (or of ``todo``, those not written
        yet, with ``started`` those in flight), retried until each is written (or can never
        be: a deleted partition)."""
        if todo is None:
            todo = set(meta.partitions)
        delay = MARKER_RETRY_S
        waits = started
        while todo and not self._closed:
            if not waits:
                waits = self._issue_markers(meta, commit, coordinator_epoch, todo)
            outcomes = await asyncio.gather(*(w for _, w in waits), return_exceptions=True)
            for (tp, _), outcome in zip(waits, outcomes, strict=True):
                if not isinstance(outcome, BaseException):
                    todo.discard(tp)
            waits = None
            if todo:
                log.warning(
                    "transaction %s: %d marker(s) not written yet, retrying in %.1fs",
                    meta.transactional_id,
                    len(todo),
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MARKER_RETRY_MAX_S)

    def _issue_markers(
        self, meta: TxnMetadata, commit: bool, coordinator_epoch: int, todo: set[TopicPartition]
    ) -> list[tuple[TopicPartition, Awaitable[object]]]:
        """Start the markers of ``todo``: what to await for each one started; those that can
        never be written leave ``todo``, those refused for now stay in it."""
        waits: list[tuple[TopicPartition, Awaitable[object]]] = []
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
        return waits

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
        for p, coord in self.runtime.served():
            for write in coord.expired(now):
                n += 1
                self.runtime.spawn(self._expire_in_turn(p, write.transactional_id))
        return n

    async def _expire_in_turn(self, p: int, tid: str) -> None:
        async with self._turn(tid):
            coord = self.runtime.states[p]
            if coord is None:
                return
            for write in coord.expired(now_ms(), only=tid):
                if write.target is not None:
                    log.info(
                        "aborting transaction %s: timed out after %d ms",
                        tid,
                        write.target.timeout_ms,
                    )
                _, rest = await self._run(p, write)
                if rest is not None:
                    with contextlib.suppress(Exception):  # logged by the completion's callback
                        await rest

    async def _compaction_loop(self) -> None:
        while True:
            await asyncio.sleep(COMPACTION_INTERVAL_S)
            await self.runtime.compact()
