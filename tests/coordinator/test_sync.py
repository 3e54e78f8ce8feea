"""SyncGroup: the leader's assignment is persisted and handed out, followers wait for it, and
members that never sync are removed (Kafka's classicGroupSync scenarios)."""

from __future__ import annotations

import pytest

from coordinator.keys import sync_key
from protocol.coordinator_records import GroupMetadataKey
from protocol.errors import ErrorCode
from tests.coordinator.harness import Harness


def completing(h: Harness, n: int = 3, **kw: object) -> tuple[list[str], int]:
    """n members through the join phase, none synced yet."""
    members = []
    rids = []
    for _ in range(n):
        members.append(h.join_member(**kw))
        rids.append(h.last_join)
    for _ in range(100):
        if all(h.reply(r) for r in rids):
            break
        h.advance(1000)
    assert str(h.shard.groups["g"].state) == "CompletingRebalance"
    return members, h.reply(rids[0]).generation_id


def test_followers_wait_for_the_leader_and_get_their_assignment() -> None:
    h = Harness()
    (a, b, c), gen = completing(h)
    rb = h.sync("g", b, gen)
    rc = h.sync("g", c, gen)
    assert h.reply(rb) is None and h.reply(rc) is None
    records_before = len(h.log)
    ra = h.sync("g", a, gen, {a: b"A", b: b"B", c: b"C"})
    assert [h.reply(r).assignment for r in (ra, rb, rc)] == [b"A", b"B", b"C"]
    assert all(h.reply(r).error_code == 0 for r in (ra, rb, rc))
    assert str(h.shard.groups["g"].state) == "Stable"
    # One GroupMetadata record with every member's assignment, in the same Result.
    ((key, value),) = h.log[records_before:]
    assert key == GroupMetadataKey(group="g")
    assert value.generation == gen and value.leader == a and value.protocol == "range"
    assert [(m.member_id, m.assignment) for m in value.members] == [
        (a, b"A"),
        (b, b"B"),
        (c, b"C"),
    ]
    result = h.results[-1]
    assert result.records and set(result.replies) == {ra, rb, rc}


def test_follower_syncing_after_the_leader_gets_its_assignment_at_once() -> None:
    h = Harness()
    (a, b), gen = completing(h, 2)
    h.sync("g", a, gen, {a: b"A", b: b"B"})
    resp = h.reply(h.sync("g", b, gen, version=5, protocol_type="consumer", protocol_name="range"))
    assert (resp.error_code, resp.assignment) == (0, b"B")
    assert (resp.protocol_type, resp.protocol_name) == ("consumer", "range")
    # No sync timer left: everybody synced.
    assert sync_key("g") not in h.timers


def test_members_missing_from_the_assignment_get_empty_bytes() -> None:
    h = Harness()
    (a, b), gen = completing(h, 2)
    rb = h.sync("g", b, gen)
    h.sync("g", a, gen, {a: b"A", "stranger": b"S"})
    assert h.reply(rb).assignment == b""
    assert [m.assignment for m in h.log[-1][1].members] == [b"A", b""]


def test_sync_errors() -> None:
    h = Harness()
    (a, b), gen = completing(h, 2)
    assert h.reply(h.sync("", a, gen)).error_code == ErrorCode.INVALID_GROUP_ID
    assert h.reply(h.sync("nope", a, gen)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.reply(h.sync("g", "nobody", gen)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.reply(h.sync("g", a, gen + 1)).error_code == ErrorCode.ILLEGAL_GENERATION
    assert h.reply(h.sync("g", a, gen, instance="x")).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_to_empty_group_is_unknown_member() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1)
    h.leave("g", [(a, None)])
    assert h.reply(h.sync("g", a, gen)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_while_preparing_rebalance() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    h.join("g", a)  # leader rejoins: PreparingRebalance
    assert h.reply(h.sync("g", b, gen)).error_code == ErrorCode.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize(
    "ptype, pname",
    [("connect", "range"), ("consumer", "roundrobin"), (None, "range"), ("consumer", None)],
)
def test_v5_protocol_type_and_name_must_match(ptype: str | None, pname: str | None) -> None:
    h = Harness()
    (a,), gen = completing(h, 1)
    resp = h.reply(h.sync("g", a, gen, version=5, protocol_type=ptype, protocol_name=pname))
    assert resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_before_v5_missing_protocol_names_are_fine() -> None:
    h = Harness()
    (a,), gen = completing(h, 1)
    resp = h.reply(h.sync("g", a, gen, {a: b"A"}, version=4))
    assert (resp.error_code, resp.assignment) == (0, b"A")


def test_rebalance_during_completing_sends_followers_back() -> None:
    h = Harness()
    (a, b), gen = completing(h, 2)
    rb = h.sync("g", b, gen)
    h.join("g", "")  # MEMBER_ID_REQUIRED: not yet a member, nothing happens
    assert h.reply(rb) is None
    h.join("g", b, protocols=[("range", b"changed")])  # b changes its metadata
    # b's parked sync is answered as the group goes back to PreparingRebalance.
    assert h.reply(rb).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert str(h.shard.groups["g"].state) == "PreparingRebalance"
    assert sync_key("g") not in h.timers


def test_pending_sync_timeout_removes_members_that_never_sync() -> None:
    h = Harness()
    (a, b, c), gen = completing(h, 3, session=60000, rebalance=20000)
    assert h.timers[sync_key("g")] == h.now + 20000
    rb = h.sync("g", b, gen)
    h.advance(20000)
    # The leader never synced: it and c are removed; b is told to rejoin.
    assert h.reply(rb).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    group = h.shard.groups["g"]
    assert list(group.members) == [b]
    assert str(group.state) == "PreparingRebalance"
    assert group.leader_id == b
    rb2 = h.join("g", b, session=60000, rebalance=20000)
    assert h.reply(rb2).generation_id == gen + 1


def test_pending_sync_timeout_in_stable_removes_laggards() -> None:
    h = Harness()
    (a, b), gen = completing(h, 2, session=60000, rebalance=20000)
    h.sync("g", a, gen, {a: b"A", b: b"B"})  # Stable, but b has not synced yet
    assert sync_key("g") in h.timers
    h.advance(20000)
    group = h.shard.groups["g"]
    assert list(group.members) == [a]
    # a alone, all joined? a has not rejoined: the group waits for it.
    assert str(group.state) == "PreparingRebalance"


def test_sync_timer_is_cancelled_once_everyone_synced() -> None:
    h = Harness()
    (a, b), gen = completing(h, 2)
    h.sync("g", b, gen)
    assert sync_key("g") in h.timers
    h.sync("g", a, gen, {a: b"", b: b""})
    assert sync_key("g") not in h.timers


def test_parked_syncs_get_a_fresh_session() -> None:
    h = Harness()
    (a, b), gen = completing(h, 2, session=10000)
    rb = h.sync("g", b, gen)
    h.advance(8000)
    assert h.heartbeat("g", a, gen) == 0  # the leader is alive (assigning)
    h.advance(7000)  # b's session timer fired while it waited: ignored
    assert b in h.shard.groups["g"].members
    h.sync("g", a, gen, {a: b"", b: b""})
    assert h.reply(rb).error_code == 0
    assert h.timers[("heartbeat", "g", b)] == h.now + 10000


def test_retried_sync_answers_the_superseded_one() -> None:
    h = Harness()
    (a, b), gen = completing(h, 2)
    first = h.sync("g", b, gen)
    second = h.sync("g", b, gen)
    assert h.reply(first).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    h.sync("g", a, gen, {b: b"B"})
    assert h.reply(second).assignment == b"B"


@pytest.mark.parametrize("version", range(6))
def test_all_versions_encode(version: int) -> None:
    h = Harness()
    (a,), gen = completing(h, 1)
    kw = {"protocol_type": "consumer", "protocol_name": "range"} if version >= 5 else {}
    h.reply(h.sync("g", a, gen, {a: b"x"}, version=version, **kw)).encode(version)
