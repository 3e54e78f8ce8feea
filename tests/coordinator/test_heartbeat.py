"""Heartbeat and session expiry (Kafka's classicGroupHeartbeat / expire scenarios)."""

from __future__ import annotations

import pytest

from coordinator.keys import heartbeat_key
from protocol.coordinator_records import GroupMetadataKey
from protocol.errors import ErrorCode
from protocol.messages import HeartbeatRequest
from tests.coordinator.harness import Harness


def test_heartbeat_in_stable_group() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    assert h.heartbeat("g", b, gen) == ErrorCode.NONE


def test_heartbeat_errors() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    assert h.heartbeat("", a, gen) == ErrorCode.INVALID_GROUP_ID
    assert h.heartbeat("nope", a, gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", "nobody", gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", a, gen + 1) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("g", a, gen, instance="i") == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_while_preparing_rebalance_asks_to_rejoin() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    h.join("g", a)
    assert h.heartbeat("g", b, gen) == ErrorCode.REBALANCE_IN_PROGRESS


def test_heartbeat_while_completing_rebalance_is_fine() -> None:
    h = Harness()
    a = h.join_member()
    h.advance(3000)
    gen = h.reply(h.last_join).generation_id
    assert str(h.shard.groups["g"].state) == "CompletingRebalance"
    assert h.heartbeat("g", a, gen) == ErrorCode.NONE


def test_heartbeat_from_a_pending_member_is_unknown() -> None:
    h = Harness()
    pending = h.reply(h.join("g")).member_id
    assert h.heartbeat("g", pending, 0) == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeats_keep_a_member_alive() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2, session=10000)
    for _ in range(10):
        h.advance(9000)
        assert h.heartbeat("g", a, gen) == 0
        assert h.heartbeat("g", b, gen) == 0
    assert str(h.shard.groups["g"].state) == "Stable"


def test_session_expiry_removes_the_member_and_rebalances() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2, session=10000)
    h.advance(9000)
    h.heartbeat("g", a, gen)
    h.advance(1000)  # b's session ends
    group = h.shard.groups["g"]
    assert list(group.members) == [a]
    assert str(group.state) == "PreparingRebalance"
    assert h.heartbeat("g", a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    resp = h.reply(h.join("g", a))
    assert (resp.generation_id, resp.leader, len(resp.members)) == (gen + 1, a, 1)


def test_expired_leader_hands_over_leadership() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2, session=10000)
    h.advance(9000)
    h.heartbeat("g", b, gen)
    h.advance(1000)
    assert h.shard.groups["g"].leader_id == b
    assert h.reply(h.join("g", b)).leader == b


def test_last_member_expiring_empties_the_group_with_a_new_generation() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1, session=10000)
    start = h.now
    h.advance(10000)
    group = h.shard.groups["g"]
    assert str(group.state) == "Empty" and not group.members
    key, value = h.log[-1]
    assert key == GroupMetadataKey(group="g")
    assert (value.generation, value.members, value.protocol, value.leader) == (
        gen + 1,
        [],
        None,
        None,
    )
    assert value.protocol_type == "consumer"
    assert value.current_state_timestamp == start + 10000


def test_pending_member_id_expires() -> None:
    h = Harness()
    pending = h.reply(h.join("g", session=7000)).member_id
    h.advance(7000)
    assert not h.shard.groups["g"].pending_join
    assert h.reply(h.join("g", pending, session=7000)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_pending_member_expiry_can_complete_a_rebalance() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1, session=60000)
    pending = h.reply(h.join("g", session=7000)).member_id
    assert pending in h.shard.groups["g"].pending_join
    # The pending id holds up nothing in Stable; a's own rejoin completes at once only if no
    # pending ids are outstanding: they count as members that have not joined yet.
    ra = h.join("g", a, session=60000)
    assert h.reply(ra) is None
    h.advance(7000)
    assert h.reply(ra).generation_id == gen + 1


def test_members_waiting_on_the_coordinator_do_not_expire() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2, session=10000, rebalance=60000)
    h.heartbeat("g", b, gen)
    ra = h.join("g", a, session=10000, rebalance=60000)  # parked until b rejoins or times out
    h.advance(10000)
    # a's JoinGroup is parked: its session cannot end; b stopped heartbeating and is removed.
    assert h.reply(ra).generation_id == gen + 1
    assert list(h.shard.groups["g"].members) == [a]


def test_commit_counts_as_a_heartbeat() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1, session=10000)
    h.advance(9000)
    assert h.commit("g", {("t", 0): 1}, member_id=a, generation=gen) == {("t", 0): 0}
    assert h.timers[heartbeat_key("g", a)] == h.now + 10000


def test_stale_timer_is_ignored() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1, session=10000)
    key = heartbeat_key("g", a)
    # The runtime fires a timer that a heartbeat replaced after it was armed.
    h.advance(5000)
    h.heartbeat("g", a, gen)
    result = h.shard.on_timer(key, h.now + 5000)
    assert result.records == [] and result.timers[0].deadline == h.now + 10000
    assert a in h.shard.groups["g"].members
    # A cancelled timer does nothing at all.
    assert h.shard.on_timer(("join", "g"), h.now).timers == []


@pytest.mark.parametrize("version", range(5))
def test_all_versions_encode(version: int) -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1)
    rid = next(h.ids)
    req = HeartbeatRequest(group_id="g", generation_id=gen, member_id=a)
    h.apply(h.shard.heartbeat(req, h.meta(version), rid, h.now))
    h.reply(rid).encode(version)
