"""Static membership (group.instance.id): replacement without a rebalance, fencing, and
static members surviving a rebalance they miss."""

from __future__ import annotations

from coordinator.keys import heartbeat_key
from protocol.errors import ErrorCode
from tests.coordinator.harness import Harness, sub


def static_group(h: Harness, instances: list[str], **kw: object) -> tuple[list[str], int]:
    rids = [h.join("g", instance=i, **kw) for i in instances]
    for _ in range(100):
        if all(h.reply(r) for r in rids):
            break
        h.advance(1000)
    ids = [h.reply(r).member_id for r in rids]
    gen = h.reply(rids[0]).generation_id
    for m in ids[1:]:
        h.sync("g", m, gen)
    h.sync("g", ids[0], gen, {m: m.encode() for m in ids})
    assert str(h.shard.groups["g"].state) == "Stable"
    return ids, gen


def test_static_join_needs_no_member_id_round_trip() -> None:
    h = Harness()
    resp = h.reply(h.join("g", instance="i-1", version=5))
    assert resp is None  # parked straight away
    assert list(h.shard.groups["g"].members) == ["i-1-u1"]  # ids start with the instance id


def test_restarted_static_follower_takes_over_without_rebalance() -> None:
    h = Harness()
    (a, b), gen = static_group(h, ["ia", "ib"])
    n = len(h.log)
    resp = h.reply(h.join("g", instance="ib", version=5))
    new_b = resp.member_id
    assert new_b != b and resp.error_code == 0
    assert (resp.generation_id, resp.leader, resp.members) == (gen, a, [])
    group = h.shard.groups["g"]
    assert str(group.state) == "Stable" and group.generation == gen
    assert list(group.members) == [a, new_b]
    assert group.members[new_b].assignment == b.encode()  # the old id's assignment
    # The new member id is persisted at once.
    ((key, value),) = h.log[n:]
    assert [m.member_id for m in value.members] == [a, new_b]
    assert [m.group_instance_id for m in value.members] == ["ia", "ib"]
    # The old id is fenced; the new one works; the old session timer is gone.
    assert h.heartbeat("g", b, gen, instance="ib") == ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat("g", new_b, gen, instance="ib") == 0
    assert heartbeat_key("g", b) not in h.timers
    sync = h.reply(h.sync("g", new_b, gen, instance="ib"))
    assert sync.assignment == b.encode()


def test_old_instance_with_a_parked_join_is_fenced() -> None:
    h = Harness()
    (a, b), gen = static_group(h, ["ia", "ib"], session=60000)
    old_join = h.join("g", b, instance="ib", protocols=[("range", sub("t", "x"))])
    assert h.reply(old_join) is None  # b changed metadata: rebalance, b parked
    h.join("g", instance="ib", protocols=[("range", sub("t", "x"))])
    resp = h.reply(old_join)
    assert resp.error_code == ErrorCode.FENCED_INSTANCE_ID and resp.member_id == b


def test_v9_static_leader_rejoining_skips_assignment() -> None:
    h = Harness()
    (a, b), gen = static_group(h, ["ia", "ib"])
    resp = h.reply(h.join("g", instance="ia", version=9))
    new_a = resp.member_id
    assert resp.skip_assignment is True
    assert resp.leader == new_a
    assert [m.member_id for m in resp.members] == [new_a, b]
    assert str(h.shard.groups["g"].state) == "Stable"
    resp.encode(9)


def test_pre_v9_static_leader_rejoining_is_told_the_old_leader() -> None:
    h = Harness()
    (a, b), gen = static_group(h, ["ia", "ib"])
    resp = h.reply(h.join("g", instance="ia", version=8))
    assert resp.leader == a != resp.member_id  # so it does not run the assignor
    assert resp.members == [] and resp.skip_assignment is False
    assert h.shard.groups["g"].leader_id == resp.member_id


def test_static_rejoin_with_a_protocol_change_rebalances() -> None:
    h = Harness()
    (a,), gen = static_group(h, ["ia"])
    # Now preferring roundrobin (still supporting range, or the group would refuse it).
    rid = h.join("g", instance="ia", protocols=[("roundrobin", sub("t")), ("range", sub("t"))])
    resp = h.reply(rid)
    # A lone member rejoining: the rebalance completes at once with the new protocol.
    assert resp.generation_id == gen + 1 and resp.protocol_name == "roundrobin"


def test_static_rejoin_during_completing_rebalance_restarts_it() -> None:
    h = Harness()
    ra = h.join("g", instance="ia")
    rb = h.join("g", instance="ib")
    h.advance(6000)
    assert h.reply(ra).leader == h.reply(ra).member_id
    b = h.reply(rb).member_id
    parked = h.sync("g", b, 1, instance="ib")
    h.join("g", instance="ia")  # the leader restarted before assigning
    assert h.reply(parked).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert str(h.shard.groups["g"].state) == "PreparingRebalance"


def test_static_members_are_not_dropped_for_missing_a_rebalance() -> None:
    h = Harness()
    ra = h.join("g", instance="ia", session=120000)
    h.advance(3000)
    a = h.reply(ra).member_id
    h.sync("g", a, 1, {a: b""})
    d = h.join_member(session=120000)
    rd = h.last_join
    h.advance(30000)  # rebalance timeout: a (static) never rejoined
    resp = h.reply(rd)
    assert resp.generation_id == 2 and resp.leader == d
    assert set(h.shard.groups["g"].members) == {a, d}
    assert h.heartbeat("g", a, 1, instance="ia") == ErrorCode.ILLEGAL_GENERATION


def test_static_member_still_expires_by_session() -> None:
    h = Harness()
    (a,), gen = static_group(h, ["ia"], session=10000)
    h.advance(10000)
    assert str(h.shard.groups["g"].state) == "Empty"
    assert not h.shard.groups["g"].static_members
