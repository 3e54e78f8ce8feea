"""Live migration of a running group between the classic and the consumer protocol: a classic
group with members becomes a consumer group that keeps them, classic members are served from
the consumer group's assignment (revocation first), and the group goes back to classic when
its last consumer-protocol member leaves."""

from __future__ import annotations

from typing import Any

from coordinator.classic.consumer_protocol import encode_assignment, parse_subscription
from protocol.errors import ErrorCode
from protocol.messages import SyncGroupRequest
from tests.coordinator.modern.harness import ClassicClient, Harness, of_type, snapshot

E = ErrorCode
P = 6  # partitions of "t"


def _classic_group(h: Harness, n: int = 2, **kw: Any) -> list[ClassicClient]:
    """A Stable classic group of `n` clients, the partitions split between them in order."""
    clients = [ClassicClient(h, ["t"], **kw) for _ in range(n)]
    for c in clients:
        assert c.join() is None  # parked until the join phase completes
    h.advance(1)
    for c in clients:
        resp = h.replies[c.last_rid]
        assert resp.error_code == 0, resp
        c.member_id, c.generation = resp.member_id, resp.generation_id
    leader = next(c for c in clients if h.replies[c.last_rid].members)
    per = P // n
    assignments = {
        c.member_id: encode_assignment([("t", list(range(i * per, (i + 1) * per)))])
        for i, c in enumerate(clients)
    }
    req = SyncGroupRequest(
        group_id="g",
        generation_id=leader.generation,
        member_id=leader.member_id,
        protocol_type="consumer",
        protocol_name=leader.protocol,
        assignments=[
            SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
            for m, a in assignments.items()
        ],
    )
    assert leader._call(h.shard.sync_group, req, 5).error_code == 0
    for c in clients:
        assert c.sync().error_code == 0
    assert str(of_type(h.shard, "classic")["g"].state) == "Stable"
    return clients


def _harness(**kw: Any) -> Harness:
    h = Harness(initial_rebalance_delay_ms=0, **kw)
    h.create_topic("t", P)
    return h


def _owned_by(clients: list[ClassicClient], consumer: dict[str, list[int]]) -> list[int]:
    parts = [p for c in clients for p in c.owned.get("t", [])] + consumer.get("t", [])
    return sorted(parts)


def _consumer_member(h: Harness, member_id: str = "c") -> dict[str, Any]:
    """A consumer-protocol member driven to completion: heartbeats until it owns its target."""
    state: dict[str, Any] = {"epoch": 0, "owned": {}}
    r = h.heartbeat(member_id=member_id, topics=["t"])
    assert r.error_code == 0, r
    state["epoch"] = r.member_epoch
    state["owned"] = h.names(r.assignment)
    return state


def _beat(h: Harness, member_id: str, st: dict[str, Any]) -> None:
    r = h.heartbeat(member_id=member_id, epoch=st["epoch"], owned=st["owned"])
    assert r.error_code == 0, r
    st["epoch"] = r.member_epoch
    if r.assignment is not None:
        st["owned"] = h.names(r.assignment)


def _settle(h: Harness, clients: list[ClassicClient], consumer: dict[str, Any] | None) -> None:
    """Run the group until nothing changes, checking after every step that no partition is
    owned twice."""
    for _ in range(10):
        for c in clients:
            if c.heartbeat() == E.REBALANCE_IN_PROGRESS:
                j, s = c.rejoin()
                assert j.error_code == 0 and s.error_code == 0, (j, s)
            owned = _owned_by(clients, consumer["owned"] if consumer else {})
            assert len(owned) == len(set(owned)), owned
        if consumer is not None:
            _beat(h, "c", consumer)
            owned = _owned_by(clients, consumer["owned"])
            assert len(owned) == len(set(owned)), owned
    assert str(h.group().state) == "Stable"


def test_a_consumer_member_upgrades_a_running_classic_group() -> None:
    h = _harness()
    a, b = _classic_group(h)
    before = {c.member_id: c.owned for c in (a, b)}
    consumer = _consumer_member(h)
    g = h.group()
    # The classic members are in, at the classic generation with their assignment, and the
    # newcomer gets nothing another member still holds.
    assert {m: g.members[m].uses_classic_protocol() for m in g.members} == {
        a.member_id: True,
        b.member_id: True,
        "c": False,
    }
    assert consumer["owned"] == {}
    assert {c.member_id: h.names(g.members[c.member_id].assigned) for c in (a, b)} == before
    assert g.group_epoch > a.generation
    # They learn of the rebalance from their heartbeats and rejoin; everyone ends with a share.
    _settle(h, [a, b], consumer)
    assert _owned_by([a, b], consumer["owned"]) == list(range(P))
    assert all(c.owned for c in (a, b)) and consumer["owned"]
    assert a.generation == g.members[a.member_id].member_epoch == g.group_epoch
    # The log replays to the same group.
    assert snapshot(h.replayed()) == snapshot(h.shard)


def test_cooperative_classic_members_revoke_before_others_are_assigned() -> None:
    h = _harness()
    a, b = _classic_group(h, cooperative=True)
    consumer = _consumer_member(h)
    gen = a.generation
    assert a.heartbeat() == E.REBALANCE_IN_PROGRESS
    j = a.join()
    # Still owns partitions the target moved away: same generation, a smaller assignment.
    member = h.group().members[a.member_id]
    if member.pending_revocation:
        assert j.generation_id == gen
        kept = a.sync()
        assert kept.error_code == 0
        assert set(a.owned.get("t", [])) < set(range(0, 3))
        assert a.heartbeat() == E.REBALANCE_IN_PROGRESS
    _settle(h, [a, b], consumer)
    assert _owned_by([a, b], consumer["owned"]) == list(range(P))


def test_the_last_consumer_member_leaving_downgrades_the_group() -> None:
    h = _harness()
    a, b = _classic_group(h)
    consumer = _consumer_member(h)
    _settle(h, [a, b], consumer)
    epoch = h.group().group_epoch
    r = h.heartbeat(member_id="c", epoch=-1)
    assert r.error_code == 0
    classic = of_type(h.shard, "classic")["g"]
    assert "g" not in of_type(h.shard, "consumer")
    assert str(classic.state) == "PreparingRebalance"
    assert classic.generation == epoch and set(classic.members) == {a.member_id, b.member_id}
    # The classic members rejoin and the group carries on as a classic group.
    for c in (a, b):
        assert c.heartbeat() in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION)
    replayed = h.replayed()
    assert "g" in of_type(replayed, "classic") and "g" not in of_type(replayed, "consumer")
    assert set(of_type(replayed, "classic")["g"].members) == {a.member_id, b.member_id}


def test_downgrade_policy_keeps_the_consumer_group() -> None:
    h = _harness(consumer_migration_policy="upgrade")
    a, b = _classic_group(h)
    consumer = _consumer_member(h)
    _settle(h, [a, b], consumer)
    assert h.heartbeat(member_id="c", epoch=-1).error_code == 0
    assert set(h.group().members) == {a.member_id, b.member_id}
    _settle(h, [a, b], None)
    assert _owned_by([a, b], {}) == list(range(P))


def test_upgrade_refused_by_policy_or_a_foreign_protocol() -> None:
    h = _harness(consumer_migration_policy="downgrade")
    _classic_group(h)
    r = h.heartbeat(member_id="c", topics=["t"])
    assert r.error_code == E.GROUP_ID_NOT_FOUND and "policy" in r.error_message
    assert "g" in of_type(h.shard, "classic")


def test_classic_members_of_a_consumer_group_time_out() -> None:
    h = _harness()
    a, b = _classic_group(h, session=6000, rebalance=8000)
    consumer = _consumer_member(h)
    # b keeps heartbeating but never rejoins: fenced after its rebalance timeout.
    assert b.heartbeat() == E.REBALANCE_IN_PROGRESS
    for _ in range(4):
        h.advance(2500)
        _beat(h, "c", consumer)
        a.heartbeat()
        b.heartbeat()
    assert b.member_id not in h.group().members
    # a stops heartbeating altogether: fenced after its session timeout.
    for _ in range(4):
        h.advance(2000)
        _beat(h, "c", consumer)
    assert set(h.group().members) == {"c"}


def test_classic_leave_and_errors_in_a_consumer_group() -> None:
    h = _harness()
    a, b = _classic_group(h)
    _consumer_member(h)
    epoch = h.group().group_epoch
    # A consumer-protocol member cannot use the classic APIs, and generations must match.
    impostor = ClassicClient(h, ["t"])
    impostor.member_id, impostor.generation = "c", 1
    assert impostor.heartbeat() == E.UNKNOWN_MEMBER_ID
    stale = ClassicClient(h, ["t"])
    stale.member_id, stale.generation = a.member_id, a.generation + 5
    assert stale.heartbeat() == E.ILLEGAL_GENERATION
    # Offsets: a classic member commits with its generation, exactly.
    assert h.commit("g", a.member_id, a.generation, {("t", 0): 5}, version=7) == {("t", 0): 0}
    assert h.commit("g", a.member_id, a.generation - 1, {("t", 0): 6}, version=7) == {
        ("t", 0): E.ILLEGAL_GENERATION
    }
    resp = a.leave()
    assert [m.error_code for m in resp.members] == [0]
    assert a.member_id not in h.group().members and h.group().group_epoch == epoch + 1


def test_a_classic_member_cannot_be_converted_from_a_broken_assignment() -> None:
    h = _harness()
    a, b = _classic_group(h)
    group = of_type(h.shard, "classic")["g"]
    group.members[b.member_id].assignment = group.members[a.member_id].assignment
    r = h.heartbeat(member_id="c", topics=["t"])
    assert r.error_code == E.GROUP_ID_NOT_FOUND and "both" in r.error_message
    assert "g" in of_type(h.shard, "classic")


def test_mixed_groups_describe_each_members_protocol() -> None:
    h = _harness()
    a, b = _classic_group(h)
    _consumer_member(h)
    [d] = h.shard.consumer_group_describe(["g"], h.topics)
    kinds = {m.member_id: m.member_type for m in d.members}
    assert kinds == {a.member_id: 0, b.member_id: 0, "c": 1}
    described = h.shard.describe_group("g", 5)
    metadata = {m.member_id: m.member_metadata for m in described.members}
    assert parse_subscription(metadata[a.member_id]).topics == ["t"] and metadata["c"] == b""
    [listed] = h.shard.list_groups(None, None)
    assert (listed.group_type, listed.protocol_type) == ("consumer", "consumer")


def test_a_new_classic_member_joins_a_consumer_group_in_two_steps() -> None:
    h = _harness()
    _consumer_member(h)
    newcomer = ClassicClient(h, ["t"])
    j, s = newcomer.rejoin()  # MEMBER_ID_REQUIRED, then JoinGroup with that id
    assert j.error_code == 0 and s.error_code == 0
    assert h.group().members[newcomer.member_id].uses_classic_protocol()


def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades() -> None:
    h = _harness()
    a, b = _classic_group(h)
    r = h.heartbeat(member_id="c", topics=["t"], instance="i-c")
    consumer = {"epoch": r.member_epoch, "owned": h.names(r.assignment)}
    _settle(h, [a, b], consumer)
    target = h.names(h.group().target["c"])
    # The static consumer-protocol member restarts as a classic one under the same instance.
    assert h.heartbeat(member_id="c", epoch=-2, instance="i-c").error_code == 0
    restarted = ClassicClient(h, ["t"], instance="i-c")
    j, s = restarted.rejoin()
    assert j.error_code == 0 and s.error_code == 0, (j, s)
    classic = of_type(h.shard, "classic")["g"]
    assert "g" not in of_type(h.shard, "consumer") and str(classic.state) == "Stable"
    assert j.generation_id == classic.generation
    # It carries on with the replaced member's partitions, without a rebalance.
    assert restarted.owned == target
    assert set(classic.members) == {a.member_id, b.member_id, restarted.member_id}
    assert "g" in of_type(h.replayed(), "classic")


def test_describe_groups_v6_refuses_a_consumer_group_v5_describes_it() -> None:
    h = _harness()
    _classic_group(h)
    _consumer_member(h)
    assert len(h.shard.describe_group("g", 5).members) == 3  # kcoord's answer for old tools
    d = h.shard.describe_group("g", 6)
    assert (d.error_code, d.error_message, d.members) == (
        E.GROUP_ID_NOT_FOUND,
        "Group g is not a classic group.",
        [],
    )
