"""Streams-group members leaving and timing out, the group after a restart (replay of its
records), offsets committed and fetched by its members, and how the other APIs see a streams
group (describe, list, delete, DescribeGroups, classic and consumer members): Kafka 4.3's rules
(GroupMetadataManager, StreamsGroup and their tests)."""

from __future__ import annotations

from typing import Any

from coordinator.shard import RequestMeta, Shard
from coordinator.streams.keys import initial_key
from protocol.errors import ErrorCode
from protocol.messages import JoinGroupRequest
from tests.coordinator.modern.harness import of_type
from tests.coordinator.streams.harness import (
    Member,
    StreamsHarness,
    as_tasks,
    settle,
    sub,
    topology,
)

E = ErrorCode


def harness(**overrides: Any) -> StreamsHarness:
    cfg = {
        "streams_initial_rebalance_delay_ms": 0,
        "streams_assignment_interval_ms": 0,
        "streams_session_timeout_ms": 10000,
        "streams_heartbeat_interval_ms": 1000,
    }
    cfg.update(overrides)
    h = StreamsHarness(**cfg)
    h.create_topic("in", 4)
    return h


def persisted(shard: Shard) -> dict[str, Any]:
    """What a streams group's records must rebuild."""
    out = {}
    for gid, g in of_type(shard, "streams").items():
        out[gid] = (
            g.group_epoch,
            g.assignment_epoch,
            g.assignment_timestamp,
            g.metadata_hash,
            g.validated_topology_epoch,
            g.last_assignment_configs,
            g.topology,
            {m: (x.metadata_key(), x.assignment_key()) for m, x in g.members.items()},
            g.target,
            g.active_holder,
            g.standby_holders,
            str(g.state),
        )
    return out


def test_leaving_bumps_the_epoch_and_frees_the_tasks() -> None:
    """Kafka's testStreamsLeavingMemberRemovesMemberAndBumpsGroupEpoch: three tombstones, then
    the group metadata at the next epoch (hash, validated epoch and configs unchanged)."""
    h = harness()
    a, b = Member(h, "a"), Member(h, "b")
    a.beat()
    b.beat()
    settle([a, b])
    epoch = h.streams().group_epoch
    n = len(h.log)
    r = b.leave()
    assert (r.error_code, r.member_id, r.member_epoch, r.status) == (0, "b", -1, [])
    kinds = [(type(k).__name__, v is None) for k, v in h.log[n:]]
    assert kinds == [
        ("StreamsGroupCurrentMemberAssignmentKey", True),
        ("StreamsGroupTargetAssignmentMemberKey", True),
        ("StreamsGroupMemberMetadataKey", True),
        ("StreamsGroupMetadataKey", False),
    ]
    assert h.log[-1][1].epoch == epoch + 1
    assert not any(k[1] == "b" for k in h.timers)
    # a takes every task at the next heartbeat.
    ra = a.beat()
    assert as_tasks(ra.active_tasks) == {"0": [0, 1, 2, 3]}
    assert h.beat("b", -1).response.error_code == E.UNKNOWN_MEMBER_ID


def test_session_timeout_fences_the_member() -> None:
    """Kafka's testStreamsSessionTimeoutExpiration."""
    h = harness()
    a, b = Member(h, "a"), Member(h, "b")
    a.beat()
    b.beat()
    settle([a, b])
    epoch = h.streams().group_epoch
    for _ in range(4):
        h.advance(4000)
        a.beat()
    assert set(h.streams().members) == {"a"}
    assert h.streams().group_epoch >= epoch + 1
    assert a.active == {"0": [0, 1, 2, 3]}


def test_group_config_overrides_timings() -> None:
    per_group: dict[str, dict[str, str]] = {}
    h = harness(per_group=per_group)
    per_group["app"] = {
        "streams.session.timeout.ms": "30000",
        "streams.heartbeat.interval.ms": "3000",
    }
    r = Member(h, "a").beat()
    assert r.heartbeat_interval_ms == 3000
    h.advance(20000)
    assert set(h.streams().members) == {"a"}
    h.advance(10001)
    assert h.streams().members == {}


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    """Kafka's testStreamsRebalanceTimeoutExpiration: armed when the member must revoke,
    fenced at its rebalance timeout if still at that epoch."""
    h = harness()
    a = Member(h, "a")
    a.beat(rebalance_timeout=5000)
    b = Member(h, "b")
    b.beat()
    h.beat("a", 2)  # learns it must revoke, never reports owning less
    assert h.timers[("sg-streams-rebalance", "app", "a")] == h.now + 5000
    for _ in range(7):
        h.advance(4000)
        h.beat("a", 2)
        b.beat()
    assert set(h.streams().members) == {"b"}
    assert b.active == {"0": [0, 1, 2, 3]}


def test_rebalance_timer_ignored_once_the_member_moved_on() -> None:
    h = harness()
    a, b = Member(h, "a"), Member(h, "b")
    a.beat()
    b.beat()
    a.beat()  # UNREVOKED at epoch 2, timer armed
    g = h.streams()
    assert g.rebalance_timer_epochs == {"a": 2}
    a.beat()  # revoked: epoch 3, timer cancelled
    assert ("sg-streams-rebalance", "app", "a") not in h.timers
    # A stale firing (the runtime's timer raced the cancel) changes nothing.
    h.apply(h.shard.on_timer(("sg-streams-rebalance", "app", "a"), h.now + 60000))
    assert set(h.streams().members) == {"a", "b"}


def test_replay_rebuilds_the_group_and_timers_resume() -> None:
    """After a restart the group is what its records say (Kafka's replay), members get fresh
    session timers and a member still revoking its rebalance timer; the topology is checked
    against the topics again at the next heartbeat, without a new epoch."""
    h = harness()
    a, b = Member(h, "a"), Member(h, "b")
    a.beat(endpoint=("a", 1))
    b.beat()
    a.beat()  # a is UNREVOKED_TASKS
    before = persisted(h.shard)
    shard = h.replayed()
    assert persisted(shard) == before
    loaded = shard.on_loaded(1000)
    keys = sorted(t.key for t in loaded.timers)
    assert keys == [
        ("sg-streams-rebalance", "app", "a"),
        ("sg-streams-session", "app", "a"),
        ("sg-streams-session", "app", "b"),
    ]
    g = of_type(shard, "streams")["app"]
    assert g.configured is None and g.members["a"].epochs == h.streams().members["a"].epochs
    h.shard, h.timers = shard, {t.key: t.deadline for t in loaded.timers}
    epoch = g.group_epoch
    r = a.beat()
    assert r.error_code == 0 and g.group_epoch == epoch and g.configured is not None


def test_offset_commits_of_members() -> None:
    """StreamsGroup.validateOffsetCommit: the member's epoch commits; an older epoch commits
    the partitions of active tasks given at or before it; OffsetCommit v9+ only; the admin
    (epoch -1) only for an empty group. OffsetFetch with a member must be at its epoch."""
    h = harness()
    a, b = Member(h, "a"), Member(h, "b")
    a.beat()
    assert h.commit("app", "a", 2, {("in", 0): 5}) == {("in", 0): 0}
    b.beat()
    a.beat()
    a.beat()  # a: epoch 3, tasks 0, 1 given at epoch 2
    assert h.streams().members["a"].member_epoch == 3
    assert h.commit("app", "a", 2, {("in", 0): 6, ("in", 2): 6}) == {
        ("in", 0): 0,
        ("in", 2): E.STALE_MEMBER_EPOCH,
    }
    assert h.commit("app", "a", 4, {("in", 0): 7}) == {("in", 0): E.STALE_MEMBER_EPOCH}
    assert h.commit("app", "a", 3, {("in", 0): 7}, version=8) == {("in", 0): E.UNSUPPORTED_VERSION}
    assert h.commit("app", "zz", 3, {("in", 0): 7}) == {("in", 0): E.UNKNOWN_MEMBER_ID}
    assert h.commit("app", "", -1, {("in", 0): 7}) == {("in", 0): E.UNKNOWN_MEMBER_ID}
    code, rows = h.shard.fetch_offsets("app", [("in", [0])], False, 9, h.now, "a", 3)
    assert code == 0 and rows[0][2] == 6
    code, _ = h.shard.fetch_offsets("app", [("in", [0])], False, 9, h.now, "a", 2)
    assert code == E.STALE_MEMBER_EPOCH
    code, _ = h.shard.fetch_offsets("app", [("in", [0])], False, 9, h.now, "x", 2)
    assert code == E.UNKNOWN_MEMBER_ID
    a.leave()
    b.leave()
    assert h.commit("app", "", -1, {("in", 1): 1}) == {("in", 1): 0}


def test_describe_list_and_delete() -> None:
    h = harness()
    a = Member(h, "a")
    a.beat(tags={"zone": "z1"}, endpoint=("host", 8080))
    [d] = h.shard.streams_group_describe(["app"])
    assert (d.error_code, d.group_id, d.group_state, d.group_epoch, d.assignment_epoch) == (
        0,
        "app",
        "Stable",
        2,
        2,
    )
    assert d.topology.epoch == 0
    [s] = d.topology.subtopologies
    assert (s.subtopology_id, s.source_topics) == ("0", ["in"])
    [m] = d.members
    assert (m.member_id, m.member_epoch, m.process_id, m.topology_epoch, m.is_classic) == (
        "a",
        2,
        "p-a",
        0,
        False,
    )
    assert (m.user_endpoint.host, m.user_endpoint.port) == ("host", 8080)
    assert [(kv.key, kv.value) for kv in m.client_tags] == [("zone", "z1")]
    assert [(t.subtopology_id, t.partitions) for t in m.assignment.active_tasks] == [
        ("0", [0, 1, 2, 3])
    ]
    assert m.target_assignment.active_tasks == m.assignment.active_tasks
    [missing] = h.shard.streams_group_describe(["nope"])
    assert (missing.error_code, missing.error_message) == (
        E.GROUP_ID_NOT_FOUND,
        "Streams group nope not found.",
    )
    [listed] = h.shard.list_groups(None, {"streams"})
    assert (listed.group_id, listed.group_type, listed.protocol_type, listed.group_state) == (
        "app",
        "streams",
        "streams",
        "Stable",
    )
    assert h.shard.list_groups({"Stable"}, None) == [listed]
    assert h.shard.describe_group("app", 5).group_state == "Dead"
    res = h.apply(h.shard.delete_groups(["app"], h.now)).replies[0]
    assert res[0].error_code == E.NON_EMPTY_GROUP
    a.leave()
    res = h.apply(h.shard.delete_groups(["app"], h.now)).replies[0]
    assert res[0].error_code == 0
    assert "app" not in h.shard.groups and "app" not in h.replayed().groups
    assert [type(k).__name__ for k, v in h.log[-3:] if v is None] == [
        "StreamsGroupTargetAssignmentMetadataKey",
        "StreamsGroupMetadataKey",
        "StreamsGroupTopologyKey",
    ]


def test_not_ready_state_filter() -> None:
    """Kafka lists NotReady streams groups under the filter name "not_ready"."""
    h = harness()
    h.beat("a", topo=topology(sub("0", ["missing"])))
    assert str(h.streams().state) == "NotReady"
    assert [g.group_id for g in h.shard.list_groups({"not_ready"}, None)] == ["app"]
    assert h.shard.list_groups({"stable"}, None) == []


def test_deleting_a_group_drops_its_pending_first_assignment() -> None:
    h = harness(streams_initial_rebalance_delay_ms=3000)
    h.beat("a")
    assert initial_key("app") in h.shard.deadlines
    h.beat("a", -1)
    h.apply(h.shard.delete_groups(["app"], h.now))
    assert initial_key("app") not in h.shard.deadlines
    # A new group of that name waits its own full delay.
    h.advance(1000)
    r = h.beat("b").response
    assert r.status[0].status_code == 5
    assert h.shard.deadlines[initial_key("app")] == h.now + 3000


def test_other_kinds_of_members() -> None:
    """A streams group id is not a consumer group's (Kafka refuses the heartbeat even when it is
    empty); a classic JoinGroup takes an empty streams group over and is refused by a busy one;
    a group holding only offsets becomes a streams group."""
    h = harness()
    Member(h, "a").beat()
    r = h.heartbeat(group="app", member_id="c1", topics=["in"])
    assert (r.error_code, r.error_message) == (
        E.GROUP_ID_NOT_FOUND,
        "Group app is not a consumer group.",
    )
    join = JoinGroupRequest(
        group_id="app",
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    rid = next(h.ids)
    m5 = RequestMeta(api_version=5, client_id="c", client_host="/1")
    out = h.apply(h.shard.join_group(join, m5, rid, h.now))
    assert out.replies[rid].error_code == E.INCONSISTENT_GROUP_PROTOCOL
    h.beat("a", -1)
    rid = next(h.ids)
    h.apply(h.shard.join_group(join, m5, rid, h.now))
    assert h.shard.groups["app"].type == "classic"
    # Offsets alone, then a streams member: it becomes a streams group keeping them.
    h.commit("solo", "", -1, {("in", 0): 3})
    assert Member(h, "s", group="solo").beat().error_code == 0
    assert h.shard.groups["solo"].type == "streams"
    code, rows = h.shard.fetch_offsets("solo", [("in", [0])], False, 9, h.now)
    assert rows[0][2] == 3
    # An empty classic group is replaced.
    h2 = harness()
    rid = next(h2.ids)
    h2.apply(h2.shard.join_group(join, m5, rid, h2.now))
    h2.advance(20000)  # the classic member times out: an empty classic group
    assert h2.shard.groups["app"].type == "classic" and h2.shard.groups["app"].is_empty()
    assert Member(h2, "s").beat().error_code == 0
    assert h2.shard.groups["app"].type == "streams"
    assert h2.replayed().groups["app"].type == "streams"


def test_a_member_rejoins_with_epoch_zero() -> None:
    """Kafka's testStreamsGroupMemberCanRejoinWithEpochZero: nothing changed, so the group
    epoch stays and the member gets its epoch and tasks back (after a restart, too)."""
    h = harness()
    a = Member(h, "a")
    a.beat()
    h.shard = h.replayed()
    g = h.streams()
    epoch, n = g.group_epoch, len(h.log)
    r = h.beat("a", 0, process="p-a").response
    assert (r.error_code, r.member_epoch, as_tasks(r.active_tasks), r.status) == (
        0,
        epoch,
        {"0": [0, 1, 2, 3]},
        [],
    )
    assert h.streams().group_epoch == epoch and len(h.log) == n


def test_rebalances_are_reported_once_complete() -> None:
    """A RebalanceEvent per epoch once every member has reconciled (as for consumer groups),
    saying who joined or left and why."""
    h = harness()
    a, b = Member(h, "a"), Member(h, "b")
    a.beat()
    assert [(e.group_type, e.generation, e.reason) for e in h.events] == [
        ("streams", 2, "member a joined")
    ]
    b.beat()
    assert len(h.events) == 1  # a still holds b's tasks
    settle([a, b])
    assert [(e.generation, e.reason, e.members, e.state) for e in h.events[1:]] == [
        (3, "member b joined", 2, "Stable")
    ]
    for _ in range(4):  # b stops heartbeating, a goes on
        h.advance(4000)
        a.beat()
    assert [e.reason for e in h.events[2:]] == ["member b left (session timeout)"]
