"""RENEW acknowledgements (KIP-1222) and the archiving of acquired records that must not be
delivered (aborted transactions under share.isolation.level=read_committed), on one
share-partition with a fake clock."""

from __future__ import annotations

from coordinator.share.partition import AckRange, AckType, RecordState, SharePartition
from protocol.errors import ErrorCode
from tests.coordinator.share.test_partition import LOCK, T0, check_invariants, runs

ACQUIRED, ARCHIVED, AVAILABLE = RecordState.ACQUIRED, RecordState.ARCHIVED, RecordState.AVAILABLE
RENEW, ACCEPT = AckType.RENEW, AckType.ACCEPT


def test_renew_restarts_the_lock_and_keeps_the_delivery() -> None:
    p = SharePartition(0)
    p.acquire("m1", log_end_offset=10, max_records=10, now=T0)
    p.take_update()
    later = T0 + LOCK - 1
    result = p.acknowledge("m1", [AckRange.of(0, 4, RENEW)], now=later)
    assert (result.applied, result.error) == (True, ErrorCode.NONE)
    assert p.take_update() is None  # a lock is never persisted: nothing to write
    deadlines = {(r.first_offset, r.last_offset): r.deadline for r in p.in_flight()}
    assert deadlines == {(0, 4): later + LOCK, (5, 9): T0 + LOCK}
    assert p.next_deadline() == T0 + LOCK
    assert p.expire(T0 + LOCK) == 5  # the ones not renewed go back
    assert runs(p) == [(0, 4, ACQUIRED, 1, "m1"), (5, 9, AVAILABLE, 1, None)]
    assert p.expire(later + LOCK - 1) == 0 and p.expire(later + LOCK) == 5
    assert p.stats().renewals_total == 5
    check_invariants(p)


def test_renew_then_accept_in_one_call_and_per_offset_types() -> None:
    p = SharePartition(0)
    p.acquire("m1", log_end_offset=4, max_records=4, now=T0)
    types = (int(RENEW), int(ACCEPT), int(RENEW), int(ACCEPT))
    assert p.acknowledge("m1", [AckRange(0, 3, types)], now=T0 + 10).applied
    assert [(r.first_offset, r.state) for r in p.in_flight()] == [
        (0, ACQUIRED),
        (1, RecordState.ACKNOWLEDGED),
        (2, ACQUIRED),
        (3, RecordState.ACKNOWLEDGED),
    ]
    assert p.stats().acknowledged_total == (0, 2, 0, 0)  # renewals are not acknowledgements
    check_invariants(p)


def test_renew_is_refused_without_permission_or_for_records_not_held() -> None:
    p = SharePartition(0)
    p.acquire("m1", log_end_offset=10, max_records=5, now=T0)
    # A request that may not renew (v1, IsRenewAck false, or disabled): an invalid type.
    assert p.acknowledge("m1", [AckRange.of(0, 1, RENEW)]).error == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("m2", [AckRange.of(0, 1, RENEW)], now=T0).error == (
        ErrorCode.INVALID_RECORD_STATE
    )
    # Records past the window were never acquired; all or none: nothing was renewed.
    bad = p.acknowledge("m1", [AckRange.of(0, 0, RENEW), AckRange.of(5, 6, RENEW)], now=T0 + 5)
    assert (bad.applied, bad.errors) == (False, (ErrorCode.NONE, ErrorCode.INVALID_REQUEST))
    assert {r.deadline for r in p.in_flight()} == {T0 + LOCK}
    p.expire(T0 + LOCK)
    # A record whose lock ran out is no longer the member's to renew.
    assert p.acknowledge("m1", [AckRange.of(0, 0, RENEW)], now=T0 + LOCK).error == (
        ErrorCode.INVALID_RECORD_STATE
    )


def test_archive_acquired_takes_only_the_members_records() -> None:
    p = SharePartition(0)
    p.acquire("m1", log_end_offset=5, max_records=5, now=T0)
    p.acquire("m2", log_end_offset=10, max_records=5, now=T0)
    p.take_update()
    assert p.archive_acquired("m1", 3, 7) == 2  # 3-4 are m1's; 5-7 are m2's
    assert runs(p) == [
        (0, 2, ACQUIRED, 1, "m1"),
        (3, 4, ARCHIVED, 1, None),
        (5, 9, ACQUIRED, 1, "m2"),
    ]
    update = p.take_update()
    assert update is not None and [
        (b.first_offset, b.last_offset) for b in update.state_batches
    ] == [(3, 4)]
    assert p.stats().archived_total == 0  # not a rejection
    assert p.archive_acquired("m1", 0, 2) == 3
    assert p.start_offset == 5  # the archived prefix is done
    check_invariants(p)
