"""JoinGroup: validation, the two-step join, generations, leader election, the protocol vote and
the initial-rebalance delay (Kafka's GroupMetadataManagerTest join scenarios)."""

from __future__ import annotations

import pytest

from coordinator.keys import heartbeat_key, join_key
from protocol.coordinator_records import GroupMetadataKey
from protocol.errors import ErrorCode
from tests.coordinator.harness import RANGE, Harness, sub


def state(h: Harness, group: str = "g") -> str:
    return str(h.shard.groups[group].state)


def test_empty_group_id_is_invalid() -> None:
    h = Harness()
    resp = h.reply(h.join(""))
    assert resp.error_code == ErrorCode.INVALID_GROUP_ID
    assert h.log == []


@pytest.mark.parametrize("session", [5999, 1800001])
def test_session_timeout_outside_bounds_is_invalid(session: int) -> None:
    h = Harness()
    resp = h.reply(h.join("g", session=session))
    assert resp.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert "g" not in h.shard.groups


def test_session_timeout_bounds_are_inclusive() -> None:
    h = Harness()
    assert h.reply(h.join("g", session=6000)).error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert h.reply(h.join("g", session=1800000)).error_code == ErrorCode.MEMBER_ID_REQUIRED


def test_two_step_join_v4_requires_member_id() -> None:
    h = Harness()
    first = h.reply(h.join("g", version=4, client_id="app"))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id == "app-u1"
    group = h.shard.groups["g"]
    assert group.is_pending("app-u1") and not group.members
    # The pending id expires like a session if it never comes back.
    assert h.timers[heartbeat_key("g", "app-u1")] == 10000
    rid = h.join("g", "app-u1", version=4)
    assert h.reply(rid) is None  # parked until the join phase ends
    assert "app-u1" in group.members and not group.pending_join
    h.advance(3000)
    resp = h.reply(rid)
    assert resp.error_code == 0
    assert (resp.member_id, resp.leader, resp.generation_id) == ("app-u1", "app-u1", 1)
    assert resp.protocol_name == "range"


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_join_before_v4_adds_member_at_once(version: int) -> None:
    h = Harness()
    rid = h.join("g", version=version)
    assert h.reply(rid) is None
    assert list(h.shard.groups["g"].members) == ["client-u1"]
    h.advance(3000)
    resp = h.reply(rid)
    assert (resp.error_code, resp.member_id, resp.generation_id) == (0, "client-u1", 1)
    assert resp.protocol_name == "range"


def test_new_group_writes_an_empty_group_record() -> None:
    h = Harness()
    h.now = 42
    h.join("g")
    assert len(h.log) == 1
    key, value = h.log[0]
    assert key == GroupMetadataKey(group="g")
    assert (value.generation, value.protocol_type, value.protocol, value.leader) == (
        0,
        "",
        None,
        None,
    )
    assert value.members == [] and value.current_state_timestamp == 42


def test_unknown_member_id_on_missing_group() -> None:
    h = Harness()
    resp = h.reply(h.join("g", "nobody"))
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert resp.member_id == "nobody"
    assert "g" not in h.shard.groups and h.log == []


def test_unknown_member_id_on_existing_group() -> None:
    h = Harness()
    h.stable_group(n=1)
    resp = h.reply(h.join("g", "nobody"))
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_generations_start_at_one_and_increase() -> None:
    h = Harness()
    members, generation = h.stable_group(n=2)
    assert generation == 1
    rid = h.join("g", members[0])  # the leader rejoins: a new generation
    rid2 = h.join("g", members[1])
    assert h.reply(rid).generation_id == 2 == h.reply(rid2).generation_id


def test_first_joiner_leads_and_alone_gets_the_members() -> None:
    h = Harness()
    a = h.join_member(protocols=[("range", sub("a"))])
    ra = h.last_join
    b = h.join_member(protocols=[("range", sub("b"))])
    rb = h.last_join
    h.advance(6000)
    leader, follower = h.reply(ra), h.reply(rb)
    assert leader.leader == follower.leader == a
    assert [(m.member_id, m.metadata) for m in leader.members] == [
        (a, sub("a")),
        (b, sub("b")),
    ]
    assert follower.members == []
    assert follower.member_id == b


@pytest.mark.parametrize(
    "prefs, chosen",
    [
        # Only protocols every member supports are candidates; each member votes for its
        # first candidate; the most votes win.
        ([["range", "roundrobin"], ["roundrobin", "range"], ["roundrobin"]], "roundrobin"),
        ([["a", "b"], ["b", "a"], ["a", "b"]], "a"),
        ([["x", "b"], ["b", "y"]], "b"),
    ],
)
def test_protocol_vote(prefs: list[list[str]], chosen: str) -> None:
    h = Harness()
    rids = []
    for names in prefs:
        h.join_member(protocols=[(n, sub("t")) for n in names])
        rids.append(h.last_join)
    h.advance(30000)
    assert {h.reply(r).protocol_name for r in rids} == {chosen}


def test_inconsistent_protocol_type_is_rejected() -> None:
    h = Harness()
    h.stable_group(n=1)
    resp = h.reply(h.join("g", protocol_type="connect"))
    assert resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert resp.member_id == ""


def test_protocol_without_common_ground_is_rejected() -> None:
    h = Harness()
    h.stable_group(n=1)
    resp = h.reply(h.join("g", protocols=[("roundrobin", b"")]))
    assert resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_empty_protocol_type_or_list_is_rejected_on_empty_group() -> None:
    h = Harness()
    assert (
        h.reply(h.join("g", protocol_type="")).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert h.reply(h.join("g", protocols=[])).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_existing_member_changing_to_unsupported_protocol_is_rejected() -> None:
    h = Harness()
    members, _ = h.stable_group(n=2)
    resp = h.reply(h.join("g", members[1], protocols=[("other", b"")]))
    assert resp.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert resp.member_id == members[1]


def test_initial_delay_holds_the_first_rebalance() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    h.join_member()
    h.advance(2999)
    assert h.reply(h.last_join) is None and state(h) == "PreparingRebalance"
    h.advance(1)
    assert h.reply(h.last_join).generation_id == 1
    assert state(h) == "CompletingRebalance"


def test_initial_delay_extends_while_members_keep_joining() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    h.join_member()
    ra = h.last_join
    h.advance(2000)
    h.join_member()  # arrives during the delay: one more delay
    h.advance(1000)  # t=3000: extended
    assert h.reply(ra) is None
    assert h.timers[join_key("g")] == 6000
    h.advance(3000)  # t=6000: nobody new, complete
    assert h.reply(ra).generation_id == 1 and len(h.reply(ra).members) == 2


def test_initial_delay_never_outlasts_the_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    h.join_member(rebalance=5000)
    ra = h.last_join
    for _ in range(10):  # a member arrives every second
        h.advance(1000)
        h.join_member(rebalance=5000)
        if h.reply(ra) is not None:
            break
    # 3000 (first delay) + min(3000, 5000 - 3000) = 5000
    assert h.reply(ra) is not None
    assert h.shard.groups["g"].generation == 1
    assert h.now == 5000


def test_zero_initial_delay_completes_on_the_next_timer() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    h.join_member()
    assert h.timers[join_key("g")] == 0
    h.advance(0)
    assert h.reply(h.last_join).generation_id == 1


def test_rebalance_timeout_is_the_largest_of_the_members() -> None:
    h = Harness()
    members, _ = h.stable_group(n=2, rebalance=20000)
    h.join("g", members[0], rebalance=45000)  # the leader rejoins: rebalance starts
    assert state(h) == "PreparingRebalance"
    assert h.timers[join_key("g")] == h.now + 45000


def test_v0_rebalance_timeout_is_the_session_timeout() -> None:
    h = Harness()
    h.join("g", version=0, session=7000, rebalance=99999)
    assert h.shard.groups["g"].members["client-u1"].rebalance_timeout_ms == 7000


def test_members_that_do_not_rejoin_are_dropped_after_the_rebalance_timeout() -> None:
    h = Harness()
    # Sessions outlast the rebalance timeout: c is dropped for not rejoining, not for silence.
    (a, b, c), _ = h.stable_group(n=3, rebalance=20000, session=30000)
    ra = h.join("g", a, rebalance=20000, session=30000)
    rb = h.join("g", b, rebalance=20000, session=30000)
    h.advance(19999)
    assert h.reply(ra) is None
    h.advance(1)
    assert h.reply(ra).generation_id == 2 == h.reply(rb).generation_id
    assert list(h.shard.groups["g"].members) == [a, b]
    assert [m.member_id for m in h.reply(ra).members] == [a, b]


def test_group_max_size() -> None:
    h = Harness(max_size=2)
    h.stable_group(n=2)
    # A full Stable group turns newcomers away before handing out a member id.
    resp = h.reply(h.join("g"))
    assert resp.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert resp.member_id == ""
    assert len(h.shard.groups["g"].members) == 2 and not h.shard.groups["g"].pending_join


def test_group_max_size_counts_rejoined_members_during_a_rebalance() -> None:
    h = Harness(max_size=1)
    h.join_member()
    first = h.last_join
    resp = h.reply(h.join("g"))
    resp = h.reply(h.join("g", resp.member_id))
    assert resp.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    h.advance(3000)
    assert h.reply(first).error_code == 0


def test_v7_names_protocol_type_and_a_null_protocol_on_errors() -> None:
    h = Harness()
    h.stable_group(n=1)
    err7 = h.reply(h.join("g", "nobody", version=7))
    err6 = h.reply(h.join("g", "nobody", version=6))
    assert err7.protocol_name is None and err6.protocol_name == ""
    assert err7.protocol_type is None
    err7.encode(7)
    err6.encode(6)


def test_single_member_rejoin_completes_at_once() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1)
    # Not an initial rebalance and everybody (one member) has joined: no waiting.
    resp = h.reply(h.join("g", a))
    assert (resp.error_code, resp.generation_id) == (0, gen + 1)


def test_v7_success_carries_protocol_type() -> None:
    h = Harness()
    h.join_member(version=7)
    h.advance(3000)
    resp = h.reply(h.last_join)
    assert (resp.protocol_type, resp.protocol_name) == ("consumer", "range")
    resp.encode(7)


def test_v8_reason_is_kept_for_the_rebalance() -> None:
    h = Harness()
    members, _ = h.stable_group(n=1)
    h.join("g", members[0], version=8, reason="topic metadata changed")
    assert "topic metadata changed" in h.shard.groups["g"].rebalance_reason


def test_stable_follower_rejoining_unchanged_gets_the_current_generation() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    resp = h.reply(h.join("g", b))
    assert (resp.error_code, resp.generation_id, resp.leader, resp.members) == (0, gen, a, [])
    assert state(h) == "Stable"


def test_stable_follower_with_new_metadata_triggers_a_rebalance() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    rid = h.join("g", b, protocols=[("range", sub("t", "u"))])
    assert h.reply(rid) is None and state(h) == "PreparingRebalance"


def test_stable_leader_rejoining_always_triggers_a_rebalance() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    assert h.reply(h.join("g", a)) is None
    assert state(h) == "PreparingRebalance"
    assert h.heartbeat("g", b, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    rb = h.join("g", b)
    assert h.reply(rb).generation_id == gen + 1


def test_completing_rebalance_rejoin_gets_the_same_answer_again() -> None:
    h = Harness()
    a = h.join_member()
    h.advance(3000)
    first = h.reply(h.last_join)
    again = h.reply(h.join("g", a))
    assert (again.generation_id, again.leader) == (first.generation_id, first.leader)
    assert [m.member_id for m in again.members] == [a]
    assert state(h) == "CompletingRebalance"


def test_rejoin_into_empty_group_with_stale_member_id() -> None:
    h = Harness()
    (a,), _ = h.stable_group(n=1)
    h.leave("g", [(a, None)])
    assert state(h) == "Empty"
    assert h.reply(h.join("g", a)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_leader_reelected_when_the_leader_leaves() -> None:
    h = Harness()
    (a, b, c), gen = h.stable_group(n=3)
    h.leave("g", [(a, None)])
    assert h.shard.groups["g"].leader_id == b
    rb, rc = h.join("g", b), h.join("g", c)
    assert h.reply(rb).leader == b and len(h.reply(rb).members) == 2
    assert h.reply(rc).members == []


def test_leader_that_does_not_rejoin_is_replaced_by_a_member_that_did() -> None:
    h = Harness()
    # A static leader is not dropped for missing the rebalance, but cannot lead it.
    la = h.join("g", instance="ia", session=60000)
    h.advance(3000)
    a = h.reply(la).member_id
    h.sync("g", a, 1, {a: b"x"})
    b = h.join_member(session=60000)
    rb = h.last_join
    h.advance(30000)
    resp = h.reply(rb)
    assert resp.leader == b and resp.generation_id == 2
    assert set(h.shard.groups["g"].members) == {a, b}


def test_duplicate_parked_join_is_answered() -> None:
    h = Harness()
    a = h.join_member()
    first = h.last_join
    second = h.join("g", a)  # a retry of the same member while the first is parked
    assert h.reply(first).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    h.advance(3000)
    assert h.reply(second).error_code == 0
    assert h.shard.groups["g"].num_awaiting_join == 0


def test_new_member_join_timeout_drops_a_parked_new_member() -> None:
    h = Harness(new_member_join_timeout_ms=5000)
    (a,), gen = h.stable_group(n=1, rebalance=60000)
    b = h.join_member(rebalance=60000)  # parked: the group waits for a to rejoin
    rb = h.last_join
    h.heartbeat("g", a, gen)
    h.advance(5000)
    assert h.reply(rb).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert b not in h.shard.groups["g"].members


def test_join_response_members_carry_group_instance_ids() -> None:
    h = Harness()
    la = h.join("g", instance="i-1")
    lb = h.join("g", instance="i-2")
    h.advance(6000)
    resp = h.reply(la)
    assert [(m.group_instance_id, m.member_id) for m in resp.members] == [
        ("i-1", "i-1-u1"),
        ("i-2", "i-2-u2"),
    ]
    assert h.reply(lb).members == []


def test_all_versions_encode() -> None:
    h = Harness()
    for version in range(10):
        rid = h.join(f"g{version}", version=version, protocols=RANGE)
        resp = h.reply(rid)
        if resp is not None and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            rid = h.join(f"g{version}", resp.member_id, version=version)
        h.advance(3000)
        h.reply(rid).encode(version)
