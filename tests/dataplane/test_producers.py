"""Idempotent producer state: Kafka's sequence and epoch rules, snapshots."""

from __future__ import annotations

import pytest

from broker.dataplane.producers import (
    INT32_MAX,
    BatchMeta,
    ProducerStateTable,
    in_sequence,
    last_sequence,
)
from protocol.errors import ErrorCode

PID = 7


def add(t: ProducerStateTable, epoch: int, first: int, last: int, offset: int) -> None:
    assert t.check(PID, epoch, first, last) is None
    t.update(PID, epoch, first, last, offset, offset + last - first, 1000 + offset)


def test_sequences_wrap_like_kafka() -> None:
    assert last_sequence(0, 4) == 4
    assert last_sequence(INT32_MAX, 0) == INT32_MAX
    assert last_sequence(INT32_MAX, 1) == 0
    assert last_sequence(INT32_MAX - 1, 3) == 1
    assert in_sequence(4, 5) and in_sequence(INT32_MAX, 0)
    assert not in_sequence(4, 6) and not in_sequence(4, 4)


def test_unknown_producer_accepts_any_sequence() -> None:
    t = ProducerStateTable()
    assert t.check(PID, 0, 42, 45) is None


def test_next_batch_must_follow_the_last_sequence() -> None:
    t = ProducerStateTable()
    add(t, 0, 0, 4, 100)
    add(t, 0, 5, 9, 105)
    assert t.check(PID, 0, 11, 12) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert t.check(PID, 0, 10, 10) is None


@pytest.mark.parametrize("which", range(5))
def test_retry_of_any_of_the_last_five_batches_is_a_duplicate(which: int) -> None:
    t = ProducerStateTable()
    for i in range(7):
        add(t, 0, 2 * i, 2 * i + 1, 10 * i)
    first = 2 * (2 + which)
    assert t.check(PID, 0, first, first + 1) == BatchMeta(
        first, first + 1, 10 * (2 + which), 10 * (2 + which) + 1
    )


def test_batch_older_than_the_last_five_is_out_of_order() -> None:
    t = ProducerStateTable()
    for i in range(7):
        add(t, 0, 2 * i, 2 * i + 1, 10 * i)
    assert t.check(PID, 0, 2, 3) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_epochs() -> None:
    t = ProducerStateTable()
    add(t, 3, 0, 4, 0)
    assert t.check(PID, 2, 5, 5) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert t.check(PID, 4, 5, 5) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    add(t, 4, 0, 0, 5)
    # The bump forgot the old epoch's batches; the old epoch is now fenced.
    assert t.check(PID, 3, 0, 4) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert t.check(PID, 4, 0, 0) == BatchMeta(0, 0, 5, 5)


def test_snapshot_round_trip_and_corruption() -> None:
    t = ProducerStateTable()
    for i in range(7):
        add(t, 1, 2 * i, 2 * i + 1, 10 * i)
    t.update(99, 0, 0, 0, 500, 500, 5)
    data = t.encode_snapshot(501)
    back, end = ProducerStateTable.decode_snapshot(data)
    assert end == 501
    assert {p: (e.epoch, list(e.batches)) for p, e in back.entries.items()} == {
        p: (e.epoch, list(e.batches)) for p, e in t.entries.items()
    }
    mid = len(data) // 2
    flipped = data[:mid] + bytes([data[mid] ^ 1]) + data[mid + 1 :]
    for bad in (data[:-1], flipped, b"XXXX" + data[4:]):
        with pytest.raises(ValueError):
            ProducerStateTable.decode_snapshot(bad)


def test_expiry_forgets_idle_producers() -> None:
    t = ProducerStateTable()
    t.update(1, 0, 0, 0, 0, 0, timestamp=1_000)
    t.update(2, 0, 0, 0, 1, 1, timestamp=5_000)
    assert t.expire(now_ms=6_000, max_age_ms=2_000) == 1
    assert list(t.entries) == [2]
