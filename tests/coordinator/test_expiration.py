"""Offsets retention (Kafka 2.1+ semantics, KIP-211) and the cleanup of empty groups."""

from __future__ import annotations

from coordinator.shard import Shard
from protocol.coordinator_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
)
from tests.coordinator.harness import Harness, sub

DAY = 24 * 3600 * 1000
RETENTION = 7 * DAY


def expire(h: Harness) -> list[tuple[object, object]]:
    return h.apply(h.shard.expire_offsets(h.now)).records


def test_empty_group_offsets_expire_retention_after_it_became_empty() -> None:
    h = Harness(offsets_retention_ms=RETENTION)
    (a,), gen = h.stable_group(n=1, session=60000)
    h.commit("g", {("t", 0): 1, ("t", 1): 2}, member_id=a, generation=gen)
    for _ in range(10):  # the group lives on for a while after its last commit
        h.advance(50000)
        assert h.heartbeat("g", a, gen) == 0
    h.leave("g", [(a, None)])
    emptied = h.now
    h.advance(RETENTION - 1)
    assert expire(h) == []
    assert h.fetch("g", [("t", [0])])[("t", 0)][0] == 1
    h.advance(1)
    assert h.now - emptied == RETENTION
    assert expire(h) == [
        (OffsetCommitKey(group="g", topic="t", partition=0), None),
        (OffsetCommitKey(group="g", topic="t", partition=1), None),
        (GroupMetadataKey(group="g"), None),
    ]
    assert "g" not in h.shard.groups


def test_stable_consumer_group_keeps_subscribed_offsets() -> None:
    h = Harness(offsets_retention_ms=RETENTION)
    (a,), gen = h.stable_group(n=1, session=1800000, protocols=[("range", sub("live"))])
    h.commit("g", {("live", 0): 1, ("gone", 0): 2}, member_id=a, generation=gen)
    h.now += RETENTION  # (the clock jumps; no timers are due in this test's view)
    records = expire(h)
    assert records == [(OffsetCommitKey(group="g", topic="gone", partition=0), None)]
    assert "g" in h.shard.groups
    assert h.fetch("g") == {("live", 0): (1, -1, "", 0)}


def test_rebalancing_group_keeps_everything() -> None:
    h = Harness(offsets_retention_ms=RETENTION)
    (a, b), gen = h.stable_group(n=2, session=1800000, rebalance=1800000)
    h.commit("g", {("gone", 0): 2}, member_id=a, generation=gen)
    h.join("g", a, session=1800000, rebalance=1800000)
    h.now += RETENTION
    assert expire(h) == []


def test_non_consumer_group_with_members_keeps_everything() -> None:
    h = Harness(offsets_retention_ms=RETENTION)
    (a,), gen = h.stable_group(
        n=1, protocol_type="connect", protocols=[("v1", b"")], session=1800000
    )
    h.commit("g", {("t", 0): 2}, member_id=a, generation=gen)
    h.now += RETENTION
    assert expire(h) == []


def test_simple_group_offsets_expire_one_by_one_from_their_commit() -> None:
    h = Harness(offsets_retention_ms=RETENTION)
    h.commit("s", {("t", 0): 1})
    h.now = DAY
    h.commit("s", {("t", 1): 1})
    h.now = RETENTION
    assert expire(h) == [(OffsetCommitKey(group="s", topic="t", partition=0), None)]
    h.now = RETENTION + DAY
    assert expire(h) == [
        (OffsetCommitKey(group="s", topic="t", partition=1), None),
        (GroupMetadataKey(group="s"), None),
    ]
    assert "s" not in h.shard.groups


def test_recommitting_restarts_a_simple_offsets_retention() -> None:
    h = Harness(offsets_retention_ms=RETENTION)
    h.commit("s", {("t", 0): 1})
    h.now = RETENTION - 1
    h.commit("s", {("t", 0): 2})
    h.now = RETENTION
    assert expire(h) == []


def test_old_records_with_an_explicit_expire_timestamp() -> None:
    shard = Shard(0, Harness().shard.config)
    shard.replay(
        OffsetCommitKey(group="s", topic="t", partition=0),
        OffsetCommitValue(offset=1, metadata="", commit_timestamp=0, expire_timestamp=1000),
    )
    assert shard.expire_offsets(999).records == []
    assert shard.expire_offsets(1000).records == [
        (OffsetCommitKey(group="s", topic="t", partition=0), None),
        (GroupMetadataKey(group="s"), None),
    ]


def test_a_v2_commit_with_a_retention_time_expires_then_unless_subscribed() -> None:
    h = Harness(offsets_retention_ms=RETENTION)
    (a,), gen = h.stable_group(group="c", n=1, session=1800000, protocols=[("range", sub("t"))])
    start = h.now
    h.commit("s", {("t", 0): 1}, version=2, retention=1000)
    h.commit("c", {("t", 0): 1, ("u", 0): 2}, member_id=a, generation=gen, version=3,
             retention=1000)  # fmt: skip
    h.now = start + 999
    assert expire(h) == []
    h.now = start + 1000
    assert expire(h) == [
        (OffsetCommitKey(group="c", topic="u", partition=0), None),
        (OffsetCommitKey(group="s", topic="t", partition=0), None),
        (GroupMetadataKey(group="s"), None),
    ]
    assert h.fetch("c") == {("t", 0): (1, -1, "", 0)}  # the group subscribes to t


def test_a_rebalancing_group_keeps_even_offsets_with_an_expire_timestamp() -> None:
    h = Harness(offsets_retention_ms=RETENTION)
    (a, b), gen = h.stable_group(n=2, session=1800000, rebalance=1800000)
    h.commit("g", {("gone", 0): 2}, member_id=a, generation=gen, version=2, retention=1000)
    h.join("g", a, session=1800000, rebalance=1800000)
    h.now += 1000
    assert expire(h) == []


def test_empty_group_without_offsets_is_deleted() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1)
    h.leave("g", [(a, None)])
    assert expire(h) == [(GroupMetadataKey(group="g"), None)]


def test_group_in_the_middle_of_a_two_step_join_is_kept() -> None:
    h = Harness()
    h.join("g")  # MEMBER_ID_REQUIRED: Empty group with a pending member id
    assert expire(h) == []
    assert "g" in h.shard.groups
