"""EndTxn under transactions version 2 (KIP-890 part 2, EndTxn v5): every commit or abort
bumps the producer's epoch, as Kafka's TransactionCoordinator.endTransaction does.

The prepared state carries the bumped epoch (the previous one kept as `last_epoch`), so the
markers go out under it and fence any late write of the transaction's own epoch; the reply
names the epoch (or, at an exhausted epoch, the next producer id at epoch 0) the producer
uses for its next transaction. With the epoch meaning "which transaction", a retry is
recognised by its epoch: one below the stored one after the bump (`retry_on_epoch_bump`), or
the last epoch of the previous producer id after a rotation (`retry_on_overflow`).

Kafka's table for requests on a completed or empty state (PF = PRODUCER_FENCED, ITS =
INVALID_TXN_STATE, NONE = answered without a write, EB = a new prepared abort, epoch bumped):

                    Abort: retry  current     Commit: retry  current
    Empty                  PF     EB                  PF     ITS
    CompleteAbort          NONE   EB                  ITS    ITS
    CompleteCommit         ITS    EB                  NONE   ITS
"""

from __future__ import annotations

from coordinator.txn.metadata import MAX_EPOCH, NO_PRODUCER_ID, TxnMetadata, TxnState
from protocol.errors import ErrorCode

VERSION_2 = 2


def retry_on_overflow(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    return (
        meta.prev_producer_id == producer_id
        and epoch == MAX_EPOCH - 1
        and (meta.producer_epoch == 0)
    )


def retry_on_epoch_bump(meta: TxnMetadata, epoch: int) -> bool:
    return meta.producer_epoch == epoch + 1


def valid_epoch(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    state = meta.state
    if state in (TxnState.ONGOING, TxnState.EMPTY, TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
        return epoch == meta.producer_epoch
    if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        return retry_on_epoch_bump(meta, epoch)
    return (
        retry_on_epoch_bump(meta, epoch)
        or retry_on_overflow(meta, producer_id, epoch)
        or epoch == meta.producer_epoch
    )


def decide(
    meta: TxnMetadata, producer_id: int, epoch: int, commit: bool
) -> tuple[ErrorCode, TxnState | None, bool]:
    """(error, the state to prepare, whether nothing was added) for an EndTxn v5 on ``meta``;
    NONE with no state to prepare: a retry of the request that ended it, answered as is."""
    overflow = retry_on_overflow(meta, producer_id, epoch)
    is_retry = retry_on_epoch_bump(meta, epoch) or overflow
    if meta.producer_id != producer_id and not overflow:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None, False
    if not valid_epoch(meta, producer_id, epoch):
        return ErrorCode.PRODUCER_FENCED, None, False
    if meta.pending is not None:
        return ErrorCode.CONCURRENT_TRANSACTIONS, None, False
    state = meta.state
    abort = TxnState.PREPARE_ABORT
    if state == TxnState.ONGOING:
        return ErrorCode.NONE, TxnState.PREPARE_COMMIT if commit else abort, False
    if state == TxnState.COMPLETE_COMMIT:
        if commit:
            return (ErrorCode.NONE, None, False) if is_retry else _invalid()
        return _invalid() if is_retry else (ErrorCode.NONE, abort, True)
    if state == TxnState.COMPLETE_ABORT:
        if commit:
            return _invalid()
        return (ErrorCode.NONE, None, False) if is_retry else (ErrorCode.NONE, abort, True)
    if state == TxnState.PREPARE_COMMIT:
        return (ErrorCode.CONCURRENT_TRANSACTIONS, None, False) if commit else _invalid()
    if state == TxnState.PREPARE_ABORT:
        return _invalid() if commit else (ErrorCode.CONCURRENT_TRANSACTIONS, None, False)
    if state == TxnState.EMPTY and not commit:
        return ErrorCode.NONE, abort, True
    return _invalid()


def _invalid() -> tuple[ErrorCode, TxnState | None, bool]:
    return ErrorCode.INVALID_TXN_STATE, None, False


def prepare(
    meta: TxnMetadata, state: TxnState, now: int, empty: bool, next_pid: int = NO_PRODUCER_ID
) -> TxnMetadata:
    """The prepared commit or abort, under the bumped epoch; `next_pid` when the bump reached
    the last epoch (the producer moves to it at completion); `empty`: a transaction to which
    nothing was added, whose start is now."""
    return meta.but(
        state=state,
        producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
        last_epoch=meta.producer_epoch,
        next_producer_id=next_pid,
        start_ms=now if empty else meta.start_ms,
        update_ms=now,
        client_version=VERSION_2,
    )


def completed(meta: TxnMetadata, state: TxnState, now: int) -> TxnMetadata:
    """The completing state of a version 2 transaction: at an exhausted epoch the producer id
    moves to the next one at epoch 0 (the last epoch the client saw stays `last_epoch`)."""
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.but(
            state=state,
            partitions=frozenset(),
            update_ms=now,
            producer_id=meta.next_producer_id,
            prev_producer_id=meta.producer_id,
            producer_epoch=0,
            next_producer_id=NO_PRODUCER_ID,
        )
    return meta.but(state=state, partitions=frozenset(), update_ms=now)


def client_view(meta: TxnMetadata) -> tuple[int, int]:
    """(producer id, epoch) the producer continues with after this prepared state completes."""
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.next_producer_id, 0
    return meta.producer_id, meta.producer_epoch
