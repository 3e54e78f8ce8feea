"""The transaction coordinator's decisions, pure: Kafka's TransactionCoordinator rules for one
`__transaction_state` partition. Transactions version 1: partitions added by
AddPartitionsToTxn / AddOffsetsToTxn; version 2 (KIP-890 part 2): partitions added implicitly
by the broker (Produce v12+, TxnOffsetCommit v5, `client_version=2`) and every EndTxn v5
bumping the epoch (`coordinator/txn/epoch_bump.py`).

Every call takes `now` and returns what to do: a `Reply` to send at once, or a `Write` of the
transactional id's next state. The runtime marks the id pending while the record is written
(`begin`), applies the target once it is durable (`finish`), sends the write's reply, and for
a prepared commit or abort writes the markers to every partition of the transaction and then
the completing record (`complete`). A replayed log rebuilds the same state (`replay`).

Fencing: a new incarnation's InitProducerId bumps the epoch; a transaction still ongoing is
aborted under the bumped epoch first (the caller retries on CONCURRENT_TRANSACTIONS), so the
old incarnation's markers, produce and commits all fail on the epoch. A timed-out transaction
is aborted the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from coordinator.txn import epoch_bump
from coordinator.txn.metadata import (
    COMPLETED,
    MAX_EPOCH,
    NO_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TopicPartition,
    TxnMetadata,
    TxnState,
)
from protocol.errors import ErrorCode


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms
    # The finalized transaction.version: what the coordinator's own aborts (a new
    # incarnation's fencing, a timeout) follow, as Kafka uses the server's level for them.
    transaction_version: int = 1


@dataclass(frozen=True)
class Reply:
    error: ErrorCode = ErrorCode.NONE
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH


@dataclass(frozen=True)
class Write:
    """Persist ``target`` (``None``: a tombstone for ``transactional_id``)."""

    transactional_id: str
    target: TxnMetadata | None
    reply: Reply | None = None
    # A prepared commit or abort: markers to every partition of the transaction, then the
    # completing record. ``reply`` is sent after that when ``reply_when_complete``.
    markers: bool = False
    reply_when_complete: bool = False


# The plain success reply (immutable: one object does).
OK = Reply()


class NeedProducerId:
    """InitProducerId needs a fresh producer id: call again with one."""


NEED_PRODUCER_ID = NeedProducerId()
Outcome = Reply | Write


class TxnCoordinator:
    def __init__(self, config: TxnConfig | None = None) -> None:
        self.config = config or TxnConfig()
        self.txns: dict[str, TxnMetadata] = {}

    # -- the log ------------------------------------------------------------------------

    def replay(self, transactional_id: str, meta: TxnMetadata | None) -> None:
        if meta is None:
            self.txns.pop(transactional_id, None)
        else:
            self.txns[transactional_id] = meta

    def begin(self, write: Write) -> None:
        meta = self.txns.get(write.transactional_id)
        if meta is not None:
            meta.pending = write.target.state if write.target is not None else TxnState.DEAD

    def finish(self, write: Write) -> None:
        """The write is durable: its target is the state."""
        self.replay(write.transactional_id, write.target)

    def fail(self, write: Write) -> None:
        """The write failed: the state stays as it was (Kafka's abortTransitionTo)."""
        meta = self.txns.get(write.transactional_id)
        if meta is not None:
            meta.pending = None

    def to_complete(self) -> list[str]:
        """Transactions left prepared (by a restart): their markers and completion are owed."""
        return [t for t, m in self.txns.items() if m.state in PREPARED and m.pending is None]

    # -- InitProducerId -----------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_pid: int,
        expected_epoch: int,
        now: int,
        fresh_pid: int | None = None,
    ) -> Outcome | NeedProducerId:
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return Reply(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD:
            if meta is not None and meta.pending is not None:
                return Reply(ErrorCode.CONCURRENT_TRANSACTIONS)
            if fresh_pid is None:
                return NEED_PRODUCER_ID
            target = TxnMetadata(
                transactional_id, fresh_pid, 0, timeout_ms, TxnState.EMPTY, update_ms=now
            )
            return Write(transactional_id, target, Reply(producer_id=fresh_pid, producer_epoch=0))
        if meta.pending is not None:
            return Reply(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected_pid != NO_PRODUCER_ID and not _is_current(meta, expected_pid, expected_epoch):
            return Reply(ErrorCode.PRODUCER_FENCED)
        if meta.state in PREPARED:
            return Reply(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state == TxnState.ONGOING:
            # A new incarnation (or KIP-360 recovery) while a transaction is open: abort it
            # under a bumped epoch; the producer retries and gets that epoch bumped again.
            return self._abort_fenced(meta, now, Reply(ErrorCode.CONCURRENT_TRANSACTIONS))
        if (
            expected_pid == meta.producer_id
            and expected_epoch == meta.last_epoch
            and meta.state == TxnState.EMPTY
        ):
            # KIP-360: the reply to the bump was lost and the producer asks again.
            return Reply(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
        if meta.epoch_exhausted():
            if fresh_pid is None:
                return NEED_PRODUCER_ID
            target = meta.but(
                producer_id=fresh_pid,
                prev_producer_id=meta.producer_id,
                producer_epoch=0,
                last_epoch=NO_EPOCH,
            )
        else:
            target = meta.but(
                producer_epoch=meta.producer_epoch + 1, last_epoch=meta.producer_epoch
            )
        target = target.but(
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            start_ms=-1,
            update_ms=now,
        )
        return Write(
            transactional_id,
            target,
            Reply(producer_id=target.producer_id, producer_epoch=target.producer_epoch),
        )

    # -- adding partitions ---------------------------------------------------------------

    def _check_producer(
        self, transactional_id: str, producer_id: int, epoch: int
    ) -> tuple[ErrorCode, TxnMetadata | None]:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if epoch != meta.producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None
        if meta.pending is not None or meta.state in PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        return ErrorCode.NONE, meta

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        now: int,
        client_version: int = 0,
    ) -> Outcome:
        """AddPartitionsToTxn / AddOffsetsToTxn (``client_version`` 0), or the implicit add of
        a transactions version 2 producer's first write to a partition (2)."""
        error, meta = self._check_producer(transactional_id, producer_id, epoch)
        if meta is None:
            return Reply(error)
        return _add(meta, partitions, now, client_version)

    @staticmethod
    def add_partitions_on(
        top: TxnMetadata,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        now: int,
        client_version: int = 0,
    ) -> Outcome | None:
        """`add_partitions` decided on top of ``top``: the state a write of the id still in
        flight moves it to (an add, or the completion of its last transaction). What
        `add_partitions` decides once that write is durable, when that needs nothing but
        ``top`` (the same producer, a state an add follows); else None: decide it then."""
        if (
            top.producer_id != producer_id
            or top.producer_epoch != epoch
            or top.state not in _ADD_FOLLOWS
        ):
            return None
        return _add(top, partitions, now, client_version)

    def verify(
        self, transactional_id: str, producer_id: int, epoch: int, partition: TopicPartition
    ) -> ErrorCode:
        """Whether a transactional write to ``partition`` belongs to the ongoing transaction
        (KIP-890 part 1's verification, which Kafka runs before appending)."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch < meta.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if epoch > meta.producer_epoch:
            return ErrorCode.INVALID_TXN_STATE
        if meta.state != TxnState.ONGOING or partition not in meta.partitions:
            return ErrorCode.INVALID_TXN_STATE
        if meta.pending is not None and meta.pending != TxnState.ONGOING:
            return ErrorCode.INVALID_TXN_STATE  # its end is being written
        return ErrorCode.NONE

    # -- ending -------------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        now: int,
        client_version: int = 0,
        fresh_pid: int | None = None,
    ) -> Outcome | NeedProducerId:
        """EndTxn; ``client_version`` 2 (EndTxn v5) ends it with an epoch bump, and at an
        exhausted epoch needs a fresh producer id (NEED_PRODUCER_ID)."""
        if client_version >= epoch_bump.VERSION_2:
            return self._end_txn_v2(transactional_id, producer_id, epoch, commit, now, fresh_pid)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD or meta.producer_id != producer_id:
            return Reply(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if epoch != meta.producer_epoch:
            return Reply(ErrorCode.PRODUCER_FENCED)
        if meta.pending is not None:
            return Reply(ErrorCode.CONCURRENT_TRANSACTIONS)
        state = meta.state
        if state == TxnState.ONGOING:
            target = meta.but(
                state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                update_ms=now,
            )
            return Write(transactional_id, target, OK, markers=True, reply_when_complete=True)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        prepared = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state == done:
            return OK  # a retry of the EndTxn that completed it
        if state == prepared:
            return Reply(ErrorCode.CONCURRENT_TRANSACTIONS)
        return Reply(ErrorCode.INVALID_TXN_STATE)

    def _end_txn_v2(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        now: int,
        fresh_pid: int | None,
    ) -> Outcome | NeedProducerId:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD:
            return Reply(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        error, state, empty = epoch_bump.decide(meta, producer_id, epoch, commit)
        if error != ErrorCode.NONE:
            return Reply(error)
        if state is None:  # a retry of the EndTxn that ended it: the epoch it gave out
            return Reply(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
        next_pid = NO_PRODUCER_ID
        if meta.epoch_exhausted():
            if fresh_pid is None:
                return NEED_PRODUCER_ID
            next_pid = fresh_pid
        target = epoch_bump.prepare(meta, state, now, empty, next_pid)
        pid, bumped = epoch_bump.client_view(target)
        return Write(
            transactional_id,
            target,
            Reply(producer_id=pid, producer_epoch=bumped),
            markers=True,
            reply_when_complete=True,
        )

    def complete(self, transactional_id: str, now: int) -> Write | None:
        """The markers of a prepared transaction are written: its completing record."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state not in PREPARED:
            return None
        state = (
            TxnState.COMPLETE_COMMIT
            if meta.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        if meta.client_version >= epoch_bump.VERSION_2:
            return Write(transactional_id, epoch_bump.completed(meta, state, now))
        return Write(transactional_id, meta.but(state=state, partitions=frozenset(), update_ms=now))

    def _abort_fenced(self, meta: TxnMetadata, now: int, reply: Reply | None) -> Write:
        """Abort ``meta``'s ongoing transaction under a bumped epoch, fencing its producer.
        Under transactions version 2 (the server's level, as Kafka's own aborts use) the
        abort bumps once more, as any version 2 EndTxn does: the markers carry epoch + 2."""
        bumped = min(meta.producer_epoch + 1, MAX_EPOCH)
        target = meta.but(
            producer_epoch=bumped,
            last_epoch=meta.producer_epoch,
            state=TxnState.PREPARE_ABORT,
            update_ms=now,
        )
        if self.config.transaction_version >= epoch_bump.VERSION_2:
            target = epoch_bump.prepare(target, TxnState.PREPARE_ABORT, now, empty=False)
        return Write(meta.transactional_id, target, reply, markers=True)

    # -- time ---------------------------------------------------------------------------

    def expired(self, now: int, only: str | None = None) -> list[Write]:
        """Ongoing transactions past their timeout: aborted, their producer fenced; and
        transactional ids unused for transactional.id.expiration.ms: removed (tombstones).
        ``only``: look at that transactional id alone."""
        out: list[Write] = []
        items = self.txns.items() if only is None else [(only, self.txns.get(only))]
        for tid, meta in items:
            if meta is None:
                continue
            if meta.pending is not None:
                continue
            if meta.state == TxnState.ONGOING and now - meta.start_ms > meta.timeout_ms:
                out.append(self._abort_fenced(meta, now, None))
            elif meta.state in COMPLETED and now - meta.update_ms > self.config.id_expiration_ms:
                out.append(Write(tid, None))
        return out

    # -- reads --------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        meta = self.txns.get(transactional_id)
        return None if meta is None or meta.state == TxnState.DEAD else meta

    def listing(
        self, states: set[TxnState], producer_ids: set[int], min_duration_ms: int, now: int
    ) -> list[TxnMetadata]:
        out = []
        for meta in self.txns.values():
            if meta.state == TxnState.DEAD:
                continue
            if states and meta.state not in states:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (
                meta.state != TxnState.ONGOING or now - meta.start_ms < min_duration_ms
            ):
                continue
            out.append(meta)
        return out


# The states a producer's add is decided from by the state alone (`_check_producer`'s).
_ADD_FOLLOWS = (TxnState.ONGOING, *COMPLETED)


def _add(
    meta: TxnMetadata, partitions: Iterable[TopicPartition], now: int, client_version: int
) -> Outcome:
    wanted = frozenset(partitions)
    if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
        return OK
    start = meta.start_ms if meta.state == TxnState.ONGOING else now
    target = meta.but(
        state=TxnState.ONGOING,
        partitions=meta.partitions | wanted,
        start_ms=start,
        update_ms=now,
        client_version=client_version,
    )
    return Write(meta.transactional_id, target, OK)


def _is_current(meta: TxnMetadata, pid: int, epoch: int) -> bool:
    """KIP-360: the producer id and epoch an InitProducerId names are this id's current (or
    the one before the last bump, a retried request)."""
    if pid == meta.producer_id:
        return epoch in (meta.producer_epoch, meta.last_epoch)
    return pid == meta.prev_producer_id and meta.producer_epoch == 0
