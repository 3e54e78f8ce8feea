"""One share-partition's record states (coordinator/share/partition.py), driven with a fake
integer clock as the runtime drives it: acquire on a ShareFetch, acknowledge, expire on the
timer from next_deadline(), and the persisted view checked against a restart."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.share.partition import (
    AckRange,
    AckType,
    AcquiredRange,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from coordinator.share.persisted import (
    UNCHANGED,
    DeliveryState,
    PersistedState,
    StateBatch,
    apply_update,
)
from protocol.errors import ErrorCode

T0 = 1_000_000
LOCK = 30_000
LOG_END = 1_000
ACCEPT, RELEASE, REJECT, GAP = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP
AVAILABLE, ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
ACKNOWLEDGED, ARCHIVED = RecordState.ACKNOWLEDGED, RecordState.ARCHIVED


def ack(p: SharePartition, member: str, first: int, last: int, kind: int) -> ErrorCode:
    return p.acknowledge(member, [AckRange.of(first, last, kind)]).error


def runs(p: SharePartition) -> list[tuple[int, int, RecordState, int, str | None]]:
    return [
        (r.first_offset, r.last_offset, r.state, r.delivery_count, r.member_id)
        for r in p.in_flight()
    ]


def check_invariants(p: SharePartition) -> None:
    """The window is covered exactly, compactly, and starts at a record still to be done."""
    rs = p.in_flight()
    pos = p.start_offset
    for r in rs:
        assert r.first_offset == pos and r.last_offset >= r.first_offset
        assert (r.state == ACQUIRED) == (r.member_id is not None) == (r.deadline is not None)
        assert 0 <= r.delivery_count <= p.config.delivery_count_limit
        pos = r.last_offset + 1
    assert pos == p.end_offset
    assert not rs or rs[0].state not in (ACKNOWLEDGED, ARCHIVED)
    for a, b in zip(rs, rs[1:], strict=False):
        assert (a.state, a.delivery_count, a.member_id, a.deadline) != (
            b.state,
            b.delivery_count,
            b.member_id,
            b.deadline,
        ), "equal neighbours are joined"
    s = p.stats()
    assert s.in_flight == p.end_offset - p.start_offset
    assert s.available + s.acquired + s.acknowledged + s.archived == s.in_flight


# ---- acquiring


def test_a_fresh_partition_acquires_new_records_from_its_start_offset() -> None:
    p = SharePartition(100)
    got = p.acquire("m1", log_end_offset=150, max_records=20, now=T0)
    assert got == [AcquiredRange(100, 119, 1)]
    assert (p.start_offset, p.end_offset) == (100, 120)
    assert p.next_deadline() == T0 + LOCK
    assert runs(p) == [(100, 119, ACQUIRED, 1, "m1")]
    check_invariants(p)


def test_acquire_stops_at_the_log_end_and_at_max_records() -> None:
    p = SharePartition(0)
    assert p.acquire("m1", log_end_offset=5, max_records=100, now=T0) == [AcquiredRange(0, 4, 1)]
    assert p.acquire("m1", log_end_offset=5, max_records=100, now=T0) == []
    assert p.acquire("m1", log_end_offset=50, max_records=0, now=T0) == []
    assert p.acquire("m1", log_end_offset=50, max_records=3, now=T0) == [AcquiredRange(5, 7, 1)]


def test_three_members_acquire_disjoint_records_from_one_partition() -> None:
    p = SharePartition(0)
    got = {m: p.acquire(m, LOG_END, 10, T0 + i) for i, m in enumerate(("a", "b", "c"))}
    assert got == {
        "a": [AcquiredRange(0, 9, 1)],
        "b": [AcquiredRange(10, 19, 1)],
        "c": [AcquiredRange(20, 29, 1)],
    }
    # Each acknowledges its own; no one can acknowledge another's.
    assert ack(p, "b", 0, 9, ACCEPT) == ErrorCode.INVALID_RECORD_STATE
    for m, [r] in got.items():
        assert ack(p, m, r.first_offset, r.last_offset, ACCEPT) == ErrorCode.NONE
    assert (p.start_offset, p.end_offset, p.in_flight()) == (30, 30, [])
    check_invariants(p)


def test_available_records_are_redelivered_first_lowest_offsets_first() -> None:
    p = SharePartition(0)
    p.acquire("a", LOG_END, 10, T0)
    p.acquire("b", LOG_END, 10, T0)
    assert ack(p, "b", 10, 19, RELEASE) == ErrorCode.NONE
    assert ack(p, "a", 5, 9, RELEASE) == ErrorCode.NONE
    got = p.acquire("c", LOG_END, 8, T0 + 1)
    assert got == [AcquiredRange(5, 12, 2)]  # 5-9 and 10-12 joined: both second deliveries
    # The rest of the released records, then new ones.
    assert p.acquire("c", LOG_END, 10, T0 + 2) == [
        AcquiredRange(13, 19, 2),
        AcquiredRange(20, 22, 1),
    ]
    assert p.stats().redeliveries_total == 15
    check_invariants(p)


# ---- acknowledging and splitting


def test_a_partial_acknowledgement_splits_the_batch_where_its_records_diverge() -> None:
    p = SharePartition(0)
    p.acquire("m", LOG_END, 10, T0)
    assert ack(p, "m", 3, 5, ACCEPT) == ErrorCode.NONE
    assert runs(p) == [
        (0, 2, ACQUIRED, 1, "m"),
        (3, 5, ACKNOWLEDGED, 1, None),
        (6, 9, ACQUIRED, 1, "m"),
    ]
    # Per-offset types: one type for each offset of the range.
    types = (ACCEPT, ACCEPT, REJECT)
    assert p.acknowledge("m", [AckRange(0, 2, types)]).error == ErrorCode.NONE
    assert p.start_offset == 6  # 0-5 all done: the start offset moves past them
    assert runs(p) == [(6, 9, ACQUIRED, 1, "m")]
    check_invariants(p)


def test_finished_neighbours_join_again_when_their_delivery_counts_agree() -> None:
    p = SharePartition(0)
    p.acquire("m", LOG_END, 10, T0)
    p.acknowledge("m", [AckRange(2, 4, (ACCEPT, RELEASE, ACCEPT))])
    assert [r[:4] for r in runs(p)] == [
        (0, 1, ACQUIRED, 1),
        (2, 2, ACKNOWLEDGED, 1),
        (3, 3, AVAILABLE, 1),
        (4, 4, ACKNOWLEDGED, 1),
        (5, 9, ACQUIRED, 1),
    ]
    p.acquire("m", LOG_END, 1, T0 + 1)  # 3 again, with a later lock than 0-1 and 5-9
    assert ack(p, "m", 3, 3, ACCEPT) == ErrorCode.NONE
    assert ack(p, "m", 5, 5, ACCEPT) == ErrorCode.NONE
    assert [r[:4] for r in runs(p)] == [
        (0, 1, ACQUIRED, 1),
        (2, 2, ACKNOWLEDGED, 1),
        (3, 3, ACKNOWLEDGED, 2),  # delivered twice: kept apart
        (4, 5, ACKNOWLEDGED, 1),
        (6, 9, ACQUIRED, 1),
    ]
    check_invariants(p)


def test_accepting_everything_moves_the_start_offset_to_the_end() -> None:
    p = SharePartition(0)
    p.acquire("m", LOG_END, 10, T0)
    assert ack(p, "m", 5, 9, ACCEPT) == ErrorCode.NONE
    assert p.start_offset == 0  # 0-4 still acquired
    assert ack(p, "m", 0, 4, ACCEPT) == ErrorCode.NONE
    assert (p.start_offset, p.end_offset) == (10, 10)
    assert p.next_deadline() is None


def test_release_makes_records_available_at_once() -> None:
    p = SharePartition(0)
    p.acquire("a", LOG_END, 5, T0)
    assert ack(p, "a", 0, 4, RELEASE) == ErrorCode.NONE
    assert runs(p) == [(0, 4, AVAILABLE, 1, None)]
    assert p.has_available() and p.next_deadline() is None
    assert p.acquire("b", LOG_END, 5, T0 + 1) == [AcquiredRange(0, 4, 2)]


def test_reject_archives_and_the_start_offset_moves_past() -> None:
    p = SharePartition(0)
    p.acquire("a", LOG_END, 5, T0)
    assert ack(p, "a", 0, 1, REJECT) == ErrorCode.NONE
    assert p.start_offset == 2
    assert p.stats().archived_total == 2
    assert ack(p, "a", 3, 3, REJECT) == ErrorCode.NONE
    assert runs(p) == [
        (2, 2, ACQUIRED, 1, "a"),
        (3, 3, ARCHIVED, 1, None),
        (4, 4, ACQUIRED, 1, "a"),
    ]
    # Archived records are never delivered again.
    assert ack(p, "a", 2, 2, RELEASE) == ErrorCode.NONE
    assert p.acquire("b", 5, 10, T0) == [AcquiredRange(2, 2, 2)]


def test_gaps_are_archived_but_not_counted_as_archived_records() -> None:
    p = SharePartition(0)
    p.acquire("a", LOG_END, 4, T0)
    types = (ACCEPT, GAP, GAP, ACCEPT)
    assert p.acknowledge("a", [AckRange(0, 3, types)]).error == ErrorCode.NONE
    assert p.start_offset == 4
    assert p.stats().archived_total == 0


def test_acknowledgements_are_all_or_none() -> None:
    p = SharePartition(0)
    p.acquire("a", LOG_END, 10, T0)
    p.acquire("b", LOG_END, 10, T0)
    result = p.acknowledge("a", [AckRange.of(0, 9, ACCEPT), AckRange.of(10, 12, ACCEPT)])
    assert result.errors == (ErrorCode.NONE, ErrorCode.INVALID_RECORD_STATE)
    assert not result.applied and result.error == ErrorCode.INVALID_RECORD_STATE
    assert runs(p) == [(0, 9, ACQUIRED, 1, "a"), (10, 19, ACQUIRED, 1, "b")]
    assert p.take_update() is not None  # the acquisitions
    assert p.take_update() is None  # the failed acknowledgement changed nothing


def test_acknowledgement_errors() -> None:
    p = SharePartition(0)
    p.acquire("a", LOG_END, 10, T0)
    assert ack(p, "a", 0, 1, RELEASE) == ErrorCode.NONE

    def error(*ranges: AckRange) -> tuple[ErrorCode, ...]:
        return p.acknowledge("a", list(ranges)).errors

    # Not acquired (released), or no longer acquired (already acknowledged).
    assert error(AckRange.of(0, 2, ACCEPT)) == (ErrorCode.INVALID_RECORD_STATE,)
    assert ack(p, "a", 5, 5, ACCEPT) == ErrorCode.NONE
    assert error(AckRange.of(5, 5, ACCEPT)) == (ErrorCode.INVALID_RECORD_STATE,)
    # Two ranges of one call overlapping: the second finds the records finished.
    assert error(AckRange.of(2, 3, ACCEPT), AckRange.of(3, 4, REJECT)) == (
        ErrorCode.NONE,
        ErrorCode.INVALID_RECORD_STATE,
    )
    # Never acquired, malformed, unknown types.
    assert error(AckRange.of(8, 10, ACCEPT)) == (ErrorCode.INVALID_REQUEST,)
    assert error(AckRange.of(50, 60, ACCEPT)) == (ErrorCode.INVALID_REQUEST,)
    assert error(AckRange.of(3, 2, ACCEPT)) == (ErrorCode.INVALID_REQUEST,)
    assert error(AckRange(2, 4, (1, 1))) == (ErrorCode.INVALID_REQUEST,)
    assert error(AckRange(2, 4, ())) == (ErrorCode.INVALID_REQUEST,)
    assert error(AckRange.of(2, 4, 7)) == (ErrorCode.INVALID_REQUEST,)
    assert runs(p)[1] == (2, 4, ACQUIRED, 1, "a")


# ---- locks and members


def test_a_crashed_members_records_are_redelivered_after_the_lock_duration() -> None:
    p = SharePartition(0)
    p.acquire("crashed", LOG_END, 10, T0)
    p.acquire("alive", LOG_END, 10, T0 + 5_000)
    assert p.next_deadline() == T0 + LOCK
    assert p.expire(T0 + LOCK - 1) == 0
    assert p.acquire("alive", 20, 10, T0 + LOCK - 1) == []  # nothing free yet
    assert p.expire(T0 + LOCK) == 10
    assert p.next_deadline() == T0 + 5_000 + LOCK
    assert runs(p)[0] == (0, 9, AVAILABLE, 1, None)
    assert p.acquire("alive", 20, 10, T0 + LOCK) == [AcquiredRange(0, 9, 2)]
    # The late acknowledgement of the crashed member is refused.
    assert ack(p, "crashed", 0, 9, ACCEPT) == ErrorCode.INVALID_RECORD_STATE
    check_invariants(p)


def test_release_member_frees_only_that_members_records() -> None:
    p = SharePartition(0)
    p.acquire("a", LOG_END, 3, T0)
    p.acquire("b", LOG_END, 3, T0)
    p.acquire("a", LOG_END, 3, T0)
    assert p.release_member("a") == 6
    assert runs(p) == [
        (0, 2, AVAILABLE, 1, None),
        (3, 5, ACQUIRED, 1, "b"),
        (6, 8, AVAILABLE, 1, None),
    ]
    assert p.release_member("nobody") == 0


def test_a_poison_record_is_archived_after_the_delivery_limit() -> None:
    p = SharePartition(0, SharePartitionConfig(delivery_count_limit=3))
    assert p.acquire("m", 2, 10, T0) == [AcquiredRange(0, 1, 1)]
    assert ack(p, "m", 0, 0, ACCEPT) == ErrorCode.NONE
    now = T0
    counts = []
    for _ in range(5):
        # The consumer crashes on record 1 every time: its lock runs out.
        now += LOCK
        assert p.expire(now) == 1
        got = p.acquire("m", 2, 10, now)
        if not got:
            break
        counts.append(got[0].delivery_count)
    assert counts == [2, 3]  # three deliveries in all: the first, then two redeliveries
    assert p.in_flight() == [] and p.start_offset == 2
    assert p.stats().archived_total == 1


def test_a_release_at_the_limit_archives() -> None:
    p = SharePartition(0, SharePartitionConfig(delivery_count_limit=2))
    p.acquire("m", LOG_END, 1, T0)
    ack(p, "m", 0, 0, RELEASE)
    assert p.acquire("m", LOG_END, 1, T0) == [AcquiredRange(0, 0, 2)]
    assert ack(p, "m", 0, 0, RELEASE) == ErrorCode.NONE
    assert p.start_offset == 1 and p.stats().archived_total == 1


# ---- the window


def test_max_in_flight_records_bounds_new_acquisitions() -> None:
    p = SharePartition(0, SharePartitionConfig(max_in_flight_records=10))
    assert p.acquire("a", LOG_END, 100, T0) == [AcquiredRange(0, 9, 1)]
    assert p.acquire("b", LOG_END, 100, T0) == []
    # Finishing records behind an unfinished one does not move the window...
    assert ack(p, "a", 1, 9, ACCEPT) == ErrorCode.NONE
    assert p.acquire("b", LOG_END, 100, T0) == []
    # ...finishing the first one does.
    assert ack(p, "a", 0, 0, RELEASE) == ErrorCode.NONE
    assert p.acquire("b", LOG_END, 100, T0) == [AcquiredRange(0, 0, 2)]
    assert ack(p, "b", 0, 0, ACCEPT) == ErrorCode.NONE
    assert p.acquire("b", LOG_END, 100, T0) == [AcquiredRange(10, 19, 1)]
    assert p.stats().in_flight == 10


def test_the_log_start_moving_drops_what_is_below_it() -> None:
    p = SharePartition(0)
    p.acquire("a", LOG_END, 10, T0)
    ack(p, "a", 0, 4, RELEASE)
    p.take_update()
    p.advance_start(3)  # retention deleted 0-2
    assert p.start_offset == 3
    assert runs(p) == [(3, 4, AVAILABLE, 1, None), (5, 9, ACQUIRED, 1, "a")]
    update = p.take_update()
    assert update is not None and update.start_offset == 3
    p.advance_start(7)
    # The holder's acknowledgement of deleted records is skipped, of the rest applied.
    assert ack(p, "a", 5, 9, ACCEPT) == ErrorCode.NONE
    assert (p.start_offset, p.end_offset) == (10, 10)
    # Past the end: nothing in flight; acquisition goes on from there.
    p.advance_start(50)
    assert (p.start_offset, p.end_offset) == (50, 50)
    assert p.acquire("a", 60, 100, T0) == [AcquiredRange(50, 59, 1)]
    p.advance_start(40)  # behind the start: nothing to do
    assert p.start_offset == 50
    check_invariants(p)


# ---- persistence


def test_updates_carry_what_changed_and_snapshots_everything() -> None:
    p = SharePartition(0)
    assert p.take_update() is None
    p.acquire("a", LOG_END, 10, T0)
    update = p.take_update()
    assert update is not None
    # An acquisition is persisted as AVAILABLE with the raised count: locks do not survive.
    assert update.start_offset == UNCHANGED
    assert update.state_batches == (StateBatch(0, 9, DeliveryState.AVAILABLE, 1),)
    p.acknowledge("a", [AckRange(2, 4, (ACCEPT, REJECT, ACCEPT))])
    update = p.take_update()
    assert update is not None and update.state_batches == (
        StateBatch(2, 2, DeliveryState.ACKNOWLEDGED, 1),
        StateBatch(3, 3, DeliveryState.ARCHIVED, 1),
        StateBatch(4, 4, DeliveryState.ACKNOWLEDGED, 1),
    )
    ack(p, "a", 0, 1, ACCEPT)
    update = p.take_update()
    # 0-4 done: the start offset says it, no batch is needed below it.
    assert update is not None and (update.start_offset, update.state_batches) == (5, ())
    assert p.snapshot() == PersistedState(5, (StateBatch(5, 9, DeliveryState.AVAILABLE, 1),))


def test_restore_brings_acquired_records_back_available() -> None:
    p = SharePartition(0, state_epoch=3)
    p.acquire("a", LOG_END, 10, T0)
    ack(p, "a", 0, 1, RELEASE)
    p.acquire("b", LOG_END, 1, T0)  # 0 again, for the second time
    ack(p, "a", 5, 6, ACCEPT)
    snap = p.snapshot()
    q = SharePartition.restore(snap)
    assert q.state_epoch == 3
    assert runs(q) == [
        (0, 0, AVAILABLE, 2, None),
        (1, 4, AVAILABLE, 1, None),
        (5, 6, ACKNOWLEDGED, 1, None),
        (7, 9, AVAILABLE, 1, None),
    ]
    assert q.snapshot() == snap
    assert q.next_deadline() is None
    assert q.acquire("c", LOG_END, 100, T0) == [
        AcquiredRange(0, 0, 3),
        AcquiredRange(1, 4, 2),
        AcquiredRange(7, 9, 2),
        AcquiredRange(10, 101, 1),
    ]


def test_restore_fills_holes_and_archives_records_out_of_deliveries() -> None:
    limit = SharePartitionConfig(delivery_count_limit=3)
    snap = PersistedState(
        10,
        (
            StateBatch(5, 12, DeliveryState.ARCHIVED, 1),  # mostly below the start: cut
            StateBatch(15, 16, DeliveryState.AVAILABLE, 3),  # out of deliveries
            StateBatch(20, 21, DeliveryState.ACKNOWLEDGED, 1),
        ),
    )
    q = SharePartition.restore(snap, limit)
    assert (q.start_offset, q.end_offset) == (13, 22)  # 10-12 archived: the start moves
    assert q.acquire("m", LOG_END, 100, T0) == [
        AcquiredRange(13, 14, 1),  # a hole: never delivered
        AcquiredRange(17, 19, 1),
        AcquiredRange(22, 116, 1),
    ]
    assert [r[:3] for r in runs(q)][:2] == [(13, 14, ACQUIRED), (15, 16, ARCHIVED)]
    assert q.stats().archived_total == 2
    check_invariants(q)
    # Records out of deliveries are nothing to hand out.
    spent = PersistedState(0, (StateBatch(0, 1, DeliveryState.AVAILABLE, 3),))
    assert not SharePartition.restore(spent, limit).has_available()


def test_stats() -> None:
    p = SharePartition(0)
    p.acquire("a", LOG_END, 10, T0)
    ack(p, "a", 2, 3, REJECT)
    ack(p, "a", 4, 5, RELEASE)
    ack(p, "a", 6, 6, ACCEPT)
    p.acquire("b", LOG_END, 1, T0)
    s = p.stats()
    assert (s.start_offset, s.end_offset, s.in_flight) == (0, 10, 10)
    assert (s.available, s.acquired, s.acknowledged, s.archived) == (1, 6, 1, 2)
    assert (s.archived_total, s.redeliveries_total) == (2, 1)


# ---- random histories: the persisted view survives a restart


MEMBERS = ("a", "b", "c")
ops = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 12)),
        st.tuples(
            st.just("ack"),
            st.sampled_from(MEMBERS),
            st.integers(0, 1_000),
            st.lists(st.sampled_from(list(AckType)), min_size=1, max_size=7),
        ),
        st.tuples(st.just("tick"), st.sampled_from([1, 1_000, LOCK // 2, LOCK])),
        st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
        st.tuples(st.just("log_start"), st.integers(0, 8)),
        st.tuples(st.just("produce"), st.integers(0, 10)),
    ),
    min_size=20,
    max_size=80,
)


def ack_range(p: SharePartition, member: str, pick: int, kinds: list[AckType]) -> AckRange:
    """Mostly a part of a run the member holds (chance alone would rarely find one), with one
    type or one per offset; sometimes any range at all."""
    held = [r for r in p.in_flight() if r.member_id == member]
    if not held or pick % 5 == 0:
        first = pick % 40
        return AckRange(first, first + pick % 7, (kinds[0],))
    r = held[pick % len(held)]
    first = r.first_offset + pick % 2 * (pick // 2 % (r.last_offset - r.first_offset + 1))
    last = r.last_offset - pick // 7 % 2 * (pick // 11 % (r.last_offset - first + 1))
    size = last - first + 1
    types = (kinds[0],) if len(kinds) == 1 else tuple((kinds * size)[:size])
    return AckRange(first, last, tuple(int(t) for t in types))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=ops, limit=st.integers(2, 4), window=st.integers(5, 30))
def test_snapshot_plus_updates_is_the_state_and_a_restart_keeps_it(
    history: list[tuple], limit: int, window: int
) -> None:
    config = SharePartitionConfig(
        max_in_flight_records=window, delivery_count_limit=limit, record_lock_duration_ms=LOCK
    )
    p = SharePartition(0, config)
    persisted = p.snapshot()
    now, log_start, log_end = T0, 0, 20
    for op in history:
        if op[0] == "acquire":
            got = p.acquire(op[1], log_end, op[2], now)
            assert sum(g.last_offset - g.first_offset + 1 for g in got) <= op[2]
            assert all(1 <= g.delivery_count <= limit for g in got)
        elif op[0] == "ack":
            _, member, pick, kinds = op
            r = ack_range(p, member, pick, kinds)
            before = p.in_flight()
            result = p.acknowledge(member, [r])
            if not result.applied:
                assert p.in_flight() == before
        elif op[0] == "tick":
            now += op[1]
            deadline = p.next_deadline()
            released = p.expire(now)
            assert (released > 0) == (deadline is not None and deadline <= now)
            assert p.next_deadline() is None or p.next_deadline() > now  # type: ignore[operator]
        elif op[0] == "leave":
            p.release_member(op[1])
        elif op[0] == "log_start":
            log_start = min(log_start + op[1], log_end)
            p.advance_start(log_start)
        else:
            log_end += op[1]
        check_invariants(p)
        assert p.end_offset - p.start_offset <= window
        update = p.take_update()
        if update is not None:
            assert_kafka_would_combine_the_same(persisted, update.state_batches)
            persisted = apply_update(persisted, update)
        assert persisted == p.snapshot()
    q = SharePartition.restore(p.snapshot(), config)
    check_invariants(q)
    assert q.snapshot() == p.snapshot()
    assert q.stats().acquired == 0
    assert q.stats().available == p.stats().available + p.stats().acquired


def assert_kafka_would_combine_the_same(state: PersistedState, batches: tuple) -> None:
    """Kafka's share coordinator keeps, for overlapping batches, the higher (delivery count,
    state) rather than the later one: our updates never lower a record's, so both agree."""
    old = {
        o: (b.delivery_count, b.delivery_state)
        for b in state.state_batches
        for o in range(b.first_offset, b.last_offset + 1)
    }
    for b in batches:
        for o in range(b.first_offset, b.last_offset + 1):
            if o in old:
                assert (b.delivery_count, b.delivery_state) >= old[o]
