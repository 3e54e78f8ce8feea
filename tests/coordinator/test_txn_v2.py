"""Transactions version 2 (KIP-890 part 2) in the transaction state machine, with a fake clock:
the implicit add, the epoch bump at every commit or abort, the retries Kafka recognises by
epoch, fencing of the old epoch, the producer id rotation at an exhausted epoch, and a
prepared transaction recovered from its log record after a restart."""

from __future__ import annotations

from coordinator.txn.coordinator import NEED_PRODUCER_ID, Reply, TxnConfig, TxnCoordinator, Write
from coordinator.txn.metadata import MAX_EPOCH, TxnMetadata, TxnState
from protocol.errors import ErrorCode
from protocol.txn_records import decode, encode_key, encode_value
from tests.coordinator.test_txn import T0, TID, apply, init

V2 = 2
E = ErrorCode


def begin(c: TxnCoordinator, epoch: int, pid: int = 7) -> None:
    """The implicit add of a version 2 producer's first write to t-0."""
    out = c.add_partitions(TID, pid, epoch, [("t", 0)], T0, client_version=V2)
    assert apply(c, out).error == E.NONE
    assert c.txns[TID].state == TxnState.ONGOING and c.txns[TID].client_version == V2


def end(c: TxnCoordinator, epoch: int, commit: bool, pid: int = 7, fresh: int = 99) -> Reply:
    out = c.end_txn(TID, pid, epoch, commit, T0 + 5, V2)
    if out is NEED_PRODUCER_ID:
        out = c.end_txn(TID, pid, epoch, commit, T0 + 5, V2, fresh)
    assert not isinstance(out, type(NEED_PRODUCER_ID))
    return apply(c, out)


def test_commit_bumps_the_epoch_and_the_markers_carry_it() -> None:
    c = TxnCoordinator()
    assert init(c) == Reply(E.NONE, 7, 0)
    begin(c, 0)
    out = c.end_txn(TID, 7, 0, True, T0 + 5, V2)
    assert isinstance(out, Write) and out.target is not None and out.markers
    assert (out.target.state, out.target.producer_epoch, out.target.last_epoch) == (
        TxnState.PREPARE_COMMIT,
        1,  # the markers are written under the bumped epoch
        0,
    )
    assert out.reply == Reply(E.NONE, 7, 1)  # the epoch of the next transaction
    assert apply(c, out) == Reply(E.NONE, 7, 1)
    meta = c.txns[TID]
    assert (meta.state, meta.producer_epoch, meta.partitions) == (
        TxnState.COMPLETE_COMMIT,
        1,
        frozenset(),
    )
    # The next transaction goes on under epoch 1; epoch 0 is fenced everywhere.
    assert c.add_partitions(TID, 7, 0, [("t", 1)], T0, V2).error == E.PRODUCER_FENCED
    assert c.verify(TID, 7, 0, ("t", 0)) == E.INVALID_PRODUCER_EPOCH
    begin(c, 1)
    assert end(c, 1, False) == Reply(E.NONE, 7, 2)
    assert c.txns[TID].state == TxnState.COMPLETE_ABORT


def test_retries_are_recognised_by_their_epoch() -> None:
    c = TxnCoordinator()
    init(c)
    begin(c, 0)
    assert end(c, 0, True) == Reply(E.NONE, 7, 1)
    # The same EndTxn again (its reply lost): answered, nothing written, same epoch given.
    assert c.end_txn(TID, 7, 0, True, T0 + 9, V2) == Reply(E.NONE, 7, 1)
    assert c.end_txn(TID, 7, 0, False, T0 + 9, V2).error == E.INVALID_TXN_STATE  # retry, abort
    # At the current epoch: a commit with nothing added is invalid, an abort is a new,
    # empty transaction aborted under the next epoch (Kafka's table).
    assert c.end_txn(TID, 7, 1, True, T0 + 9, V2).error == E.INVALID_TXN_STATE
    assert end(c, 1, False) == Reply(E.NONE, 7, 2)
    assert c.txns[TID].start_ms == T0 + 5  # an empty abort starts when it is asked for
    assert c.end_txn(TID, 7, 1, False, T0 + 9, V2) == Reply(E.NONE, 7, 2)  # its retry
    assert c.end_txn(TID, 7, 1, True, T0 + 9, V2).error == E.INVALID_TXN_STATE
    # Older or newer epochs than those: fenced.
    assert c.end_txn(TID, 7, 0, False, T0, V2).error == E.PRODUCER_FENCED
    assert c.end_txn(TID, 7, 3, False, T0, V2).error == E.PRODUCER_FENCED
    assert c.end_txn(TID, 8, 2, False, T0, V2).error == E.INVALID_PRODUCER_ID_MAPPING


def test_empty_state_and_the_prepared_states() -> None:
    c = TxnCoordinator()
    init(c)  # Empty at epoch 0
    assert c.end_txn(TID, 7, 0, True, T0, V2).error == E.INVALID_TXN_STATE
    assert c.end_txn(TID, 7, 1, False, T0, V2).error == E.PRODUCER_FENCED
    begin(c, 0)
    out = c.end_txn(TID, 7, 0, True, T0, V2)
    assert isinstance(out, Write)
    c.begin(out)
    c.finish(out)  # PrepareCommit at epoch 1, markers not written yet
    assert c.end_txn(TID, 7, 0, True, T0, V2).error == E.CONCURRENT_TRANSACTIONS  # its retry
    assert c.end_txn(TID, 7, 0, False, T0, V2).error == E.INVALID_TXN_STATE
    assert c.end_txn(TID, 7, 1, True, T0, V2).error == E.PRODUCER_FENCED  # not a retry


def test_an_exhausted_epoch_moves_to_the_next_producer_id() -> None:
    c = TxnCoordinator()
    c.txns[TID] = TxnMetadata(
        TID, 7, MAX_EPOCH - 1, 60_000, TxnState.ONGOING, frozenset({("t", 0)}), T0, T0
    )
    c.txns[TID].client_version = V2
    assert c.end_txn(TID, 7, MAX_EPOCH - 1, True, T0, V2) is NEED_PRODUCER_ID
    out = c.end_txn(TID, 7, MAX_EPOCH - 1, True, T0, V2, 99)
    assert isinstance(out, Write) and out.target is not None
    assert (out.target.producer_id, out.target.producer_epoch, out.target.next_producer_id) == (
        7,
        MAX_EPOCH,  # the markers fence every epoch of producer 7
        99,
    )
    assert apply(c, out) == Reply(E.NONE, 99, 0)
    meta = c.txns[TID]
    assert (meta.producer_id, meta.producer_epoch, meta.prev_producer_id) == (99, 0, 7)
    assert meta.next_producer_id == -1
    # A retry under the old id's last epoch is recognised after the rotation.
    assert c.end_txn(TID, 7, MAX_EPOCH - 1, True, T0, V2) == Reply(E.NONE, 99, 0)
    assert c.end_txn(TID, 7, MAX_EPOCH - 2, True, T0, V2).error == (E.INVALID_PRODUCER_ID_MAPPING)


def _restarted(c: TxnCoordinator) -> TxnCoordinator:
    """A new coordinator that replayed c's state from its log records."""
    fresh = TxnCoordinator(c.config)
    for tid, meta in c.txns.items():
        record = decode(encode_key(tid), encode_value(meta.to_value(), meta.record_version))
        fresh.replay(tid, TxnMetadata.from_value(tid, record.value))
    return fresh


def test_a_prepared_commit_is_completed_after_a_restart() -> None:
    c = TxnCoordinator()
    init(c)
    begin(c, 0)
    out = c.end_txn(TID, 7, 0, True, T0, V2)
    assert isinstance(out, Write)
    c.begin(out)
    c.finish(out)  # durable; the broker stops before the markers
    again = _restarted(c)
    meta = again.txns[TID]
    assert (meta.state, meta.producer_epoch, meta.client_version) == (
        TxnState.PREPARE_COMMIT,
        1,
        V2,
    )
    assert again.to_complete() == [TID]  # the runtime writes the markers (epoch 1), then:
    done = again.complete(TID, T0 + 10)
    assert done is not None and done.target is not None
    assert (done.target.state, done.target.producer_epoch) == (TxnState.COMPLETE_COMMIT, 1)
    again.begin(done)
    again.finish(done)
    # The producer's retry of its EndTxn is answered with the bumped epoch.
    assert again.end_txn(TID, 7, 0, True, T0, V2) == Reply(E.NONE, 7, 1)


def test_a_prepared_rotation_survives_a_restart() -> None:
    c = TxnCoordinator()
    c.txns[TID] = TxnMetadata(
        TID, 7, MAX_EPOCH - 1, 60_000, TxnState.ONGOING, frozenset({("t", 0)}), T0, T0
    )
    out = c.end_txn(TID, 7, MAX_EPOCH - 1, False, T0, V2, 99)
    assert isinstance(out, Write)
    c.begin(out)
    c.finish(out)
    again = _restarted(c)
    assert again.txns[TID].next_producer_id == 99  # NextProducerId, a tagged field
    done = again.complete(TID, T0)
    assert done is not None and done.target is not None
    assert (done.target.producer_id, done.target.producer_epoch) == (99, 0)


def test_a_new_incarnation_fences_with_a_double_bump_under_version_2() -> None:
    c = TxnCoordinator(TxnConfig(transaction_version=2))
    init(c)
    begin(c, 0)
    out = c.init_producer_id(TID, 60_000, -1, -1, T0)
    assert isinstance(out, Write) and out.target is not None and out.markers
    # The ongoing transaction is aborted under epoch 2 (fenced to 1, bumped as version 2
    # ends a transaction); the caller retries on CONCURRENT_TRANSACTIONS.
    assert (out.target.state, out.target.producer_epoch) == (TxnState.PREPARE_ABORT, 2)
    assert apply(c, out).error == E.CONCURRENT_TRANSACTIONS
    assert init(c) == Reply(E.NONE, 7, 3)
    # Under version 1 the fence bumps once.
    c1 = TxnCoordinator()
    init(c1)
    apply(c1, c1.add_partitions(TID, 7, 0, [("t", 0)], T0))
    out = c1.init_producer_id(TID, 60_000, -1, -1, T0)
    assert isinstance(out, Write) and out.target is not None
    assert out.target.producer_epoch == 1


def test_version_1_clients_keep_version_1() -> None:
    c = TxnCoordinator(TxnConfig(transaction_version=2))
    init(c)
    apply(c, c.add_partitions(TID, 7, 0, [("t", 0)], T0))
    assert c.txns[TID].record_version == 0  # written as before
    assert apply(c, c.end_txn(TID, 7, 0, True, T0)) == Reply()
    meta = c.txns[TID]
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_COMMIT, 0)
