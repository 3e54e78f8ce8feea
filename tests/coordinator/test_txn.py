"""The transaction state machine (coordinator/txn/), driven with a fake clock as the runtime
drives it: a Write is begun, then finished once "durable"; a prepared end writes markers
(here: nothing to do) and then the completing record."""

from __future__ import annotations

import pytest

from coordinator.txn.coordinator import (
    NEED_PRODUCER_ID,
    Reply,
    TxnConfig,
    TxnCoordinator,
    Write,
)
from coordinator.txn.metadata import TxnMetadata, TxnState
from protocol.errors import ErrorCode
from protocol.txn_records import decode, encode_key, encode_value

T0 = 1_000_000
TID = "app-1"


def apply(c: TxnCoordinator, outcome: Reply | Write | object) -> Reply:
    """What the runtime does with an outcome, all writes succeeding at once."""
    if isinstance(outcome, Reply):
        return outcome
    assert isinstance(outcome, Write)
    c.begin(outcome)
    c.finish(outcome)
    if outcome.markers:
        done = c.complete(outcome.transactional_id, T0)
        assert done is not None
        c.begin(done)
        c.finish(done)
    return outcome.reply or Reply()


def init(c: TxnCoordinator, pid: int = 7, now: int = T0, **kw: int) -> Reply:
    out = c.init_producer_id(
        TID, kw.get("timeout", 60_000), kw.get("ep", -1), kw.get("ee", -1), now
    )
    if out is NEED_PRODUCER_ID:
        out = c.init_producer_id(
            TID, kw.get("timeout", 60_000), kw.get("ep", -1), kw.get("ee", -1), now, pid
        )
    return apply(c, out)


def test_first_init_allocates_a_producer_id_and_later_ones_bump_the_epoch() -> None:
    c = TxnCoordinator()
    assert c.init_producer_id(TID, 60_000, -1, -1, T0) is NEED_PRODUCER_ID
    assert init(c) == Reply(ErrorCode.NONE, 7, 0)
    assert init(c) == Reply(ErrorCode.NONE, 7, 1)
    assert c.txns[TID].state == TxnState.EMPTY


def test_timeout_above_the_maximum_is_refused() -> None:
    c = TxnCoordinator(TxnConfig(max_timeout_ms=1000))
    assert init(c, timeout=1001).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert init(c, timeout=0).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_commit_goes_through_prepare_to_complete_and_retries_are_answered() -> None:
    c = TxnCoordinator()
    r = init(c)
    assert apply(c, c.add_partitions(TID, 7, r.producer_epoch, [("t", 0)], T0)).error == 0
    assert c.txns[TID].state == TxnState.ONGOING and c.txns[TID].start_ms == T0
    # Adding what is already there writes nothing.
    assert c.add_partitions(TID, 7, 0, [("t", 0)], T0 + 1) == Reply()
    end = c.end_txn(TID, 7, 0, True, T0 + 2)
    assert isinstance(end, Write) and end.target is not None
    assert end.target.state == TxnState.PREPARE_COMMIT and end.markers
    c.begin(end)
    # While the prepare is being written, everything else waits.
    assert c.add_partitions(TID, 7, 0, [("t", 1)], T0).error == ErrorCode.CONCURRENT_TRANSACTIONS
    c.finish(end)
    assert c.end_txn(TID, 7, 0, True, T0).error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert c.end_txn(TID, 7, 0, False, T0).error == ErrorCode.INVALID_TXN_STATE
    assert c.to_complete() == [TID]
    done = c.complete(TID, T0 + 3)
    assert done is not None
    apply(c, done)
    meta = c.txns[TID]
    assert meta.state == TxnState.COMPLETE_COMMIT and meta.partitions == frozenset()
    assert c.end_txn(TID, 7, 0, True, T0) == Reply()  # a retry after completion
    assert c.end_txn(TID, 7, 0, False, T0).error == ErrorCode.INVALID_TXN_STATE


def test_end_without_a_transaction_is_an_invalid_state() -> None:
    c = TxnCoordinator()
    init(c)
    assert c.end_txn(TID, 7, 0, True, T0).error == ErrorCode.INVALID_TXN_STATE


def test_producer_checks() -> None:
    c = TxnCoordinator()
    init(c)
    assert c.add_partitions("other", 7, 0, [("t", 0)], T0).error == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    assert c.add_partitions(TID, 8, 0, [("t", 0)], T0).error == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    init(c)  # epoch 1 now
    assert c.add_partitions(TID, 7, 0, [("t", 0)], T0).error == ErrorCode.PRODUCER_FENCED
    assert c.end_txn(TID, 7, 0, True, T0).error == ErrorCode.PRODUCER_FENCED


def test_a_new_incarnation_aborts_the_open_transaction_under_a_bumped_epoch() -> None:
    c = TxnCoordinator()
    init(c)
    apply(c, c.add_partitions(TID, 7, 0, [("t", 0)], T0))
    fence = c.init_producer_id(TID, 60_000, -1, -1, T0 + 5)
    assert isinstance(fence, Write) and fence.target is not None
    assert fence.reply == Reply(ErrorCode.CONCURRENT_TRANSACTIONS)
    assert fence.target.state == TxnState.PREPARE_ABORT and fence.target.producer_epoch == 1
    assert fence.markers and not fence.reply_when_complete
    apply(c, fence)
    assert c.txns[TID].state == TxnState.COMPLETE_ABORT
    # The old producer is fenced; the new one gets the epoch bumped again.
    assert c.end_txn(TID, 7, 0, True, T0).error == ErrorCode.PRODUCER_FENCED
    assert init(c) == Reply(ErrorCode.NONE, 7, 2)


def test_kip360_bump_with_the_current_epoch_and_a_fenced_one() -> None:
    c = TxnCoordinator()
    init(c)
    assert init(c, ep=7, ee=0) == Reply(ErrorCode.NONE, 7, 1)
    # The reply was lost: asking again with the old epoch returns the same bump.
    assert init(c, ep=7, ee=0) == Reply(ErrorCode.NONE, 7, 1)
    assert init(c, ep=7, ee=5).error == ErrorCode.PRODUCER_FENCED
    assert init(c, ep=99, ee=1).error == ErrorCode.PRODUCER_FENCED


def test_an_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    c = TxnCoordinator()
    init(c)
    c.txns[TID] = c.txns[TID].but(producer_epoch=32766)
    assert c.init_producer_id(TID, 60_000, -1, -1, T0) is NEED_PRODUCER_ID
    r = init(c, pid=11)
    assert r == Reply(ErrorCode.NONE, 11, 0)
    assert c.txns[TID].prev_producer_id == 7


def test_timed_out_transactions_are_aborted_and_idle_ids_expire() -> None:
    c = TxnCoordinator(TxnConfig(id_expiration_ms=10_000))
    init(c, timeout=1000)
    apply(c, c.add_partitions(TID, 7, 0, [("t", 0)], T0))
    assert c.expired(T0 + 1000) == []
    (abort,) = c.expired(T0 + 1001)
    assert abort.target is not None and abort.target.state == TxnState.PREPARE_ABORT
    assert abort.target.producer_epoch == 1 and abort.reply is None
    apply(c, abort)
    assert c.txns[TID].state == TxnState.COMPLETE_ABORT
    assert c.expired(T0 + 5000) == []
    (gone,) = c.expired(T0 + 10_001)
    assert gone.target is None
    apply(c, gone)
    assert TID not in c.txns


def test_verify_accepts_only_partitions_of_the_ongoing_transaction() -> None:
    c = TxnCoordinator()
    init(c)
    assert c.verify(TID, 7, 0, ("t", 0)) == ErrorCode.INVALID_TXN_STATE
    apply(c, c.add_partitions(TID, 7, 0, [("t", 0)], T0))
    assert c.verify(TID, 7, 0, ("t", 0)) == ErrorCode.NONE
    assert c.verify(TID, 7, 0, ("t", 1)) == ErrorCode.INVALID_TXN_STATE
    assert c.verify(TID, 8, 0, ("t", 0)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_a_failed_write_leaves_the_state_as_it_was() -> None:
    c = TxnCoordinator()
    init(c)
    w = c.add_partitions(TID, 7, 0, [("t", 0)], T0)
    assert isinstance(w, Write)
    c.begin(w)
    c.fail(w)
    assert c.txns[TID].state == TxnState.EMPTY and c.txns[TID].pending is None


@pytest.mark.parametrize("state", list(TxnState))
def test_metadata_round_trips_through_kafkas_record(state: TxnState) -> None:
    meta = TxnMetadata(TID, 5, 3, 60_000, state, frozenset({("a", 1), ("a", 0), ("b", 2)}), 10, 20)
    tid, value = decode(encode_key(TID), encode_value(meta.to_value()))
    assert tid == TID
    back = TxnMetadata.from_value(tid, value)
    assert back == meta


def test_listing_filters() -> None:
    c = TxnCoordinator()
    init(c)
    apply(c, c.add_partitions(TID, 7, 0, [("t", 0)], T0))
    assert [m.transactional_id for m in c.listing(set(), set(), -1, T0)] == [TID]
    assert c.listing({TxnState.EMPTY}, set(), -1, T0) == []
    assert c.listing(set(), {8}, -1, T0) == []
    assert c.listing(set(), set(), 500, T0 + 100) == []
    assert len(c.listing(set(), set(), 500, T0 + 600)) == 1
