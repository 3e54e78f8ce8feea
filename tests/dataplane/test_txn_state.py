"""The last stable offset of a partition's transactions (broker/dataplane/txnstate.py)."""

from __future__ import annotations

from broker.dataplane.txnstate import ABORT, COMMIT, PartitionTxns
from protocol.records import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader


def header(pid: int, offset: int, control: bool = False) -> BatchHeader:
    attributes = TRANSACTIONAL_MASK | (CONTROL_MASK if control else 0)
    return BatchHeader(offset, 0, 0, 2, 0, attributes, 0, 0, 0, pid, 0, 0, 1)


def test_an_open_transaction_holds_the_last_stable_offset_at_its_first_offset() -> None:
    t = PartitionTxns()
    t.on_batch(header(7, 3))
    assert t.last_stable_offset(10) == 3
    assert t.last_stable_offset(2) == 2  # never past the high watermark


def test_a_transaction_stays_unstable_until_its_marker_is_below_the_high_watermark() -> None:
    t = PartitionTxns()
    t.on_batch(header(7, 0))
    t.on_batch(header(7, 1))
    t.closing_at(7, 2)  # the commit marker is appended at 2, not yet durable
    t.on_batch(header(7, 2, control=True), COMMIT)
    assert t.open == {}
    assert t.last_stable_offset(2) == 0  # the records are durable, their marker is not
    assert t.last_stable_offset(3) == 3
    assert t.closing == []
    assert t.last_stable_offset(3) == 3


def test_a_replayed_marker_closes_its_transaction_at_once() -> None:
    t = PartitionTxns()
    t.on_batch(header(7, 0))
    t.on_batch(header(7, 1, control=True), ABORT)
    assert t.last_stable_offset(2) == 2
    assert [(a.first_offset, a.last_offset) for a in t.aborted] == [(0, 1)]
