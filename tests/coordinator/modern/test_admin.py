"""ConsumerGroupDescribe, DescribeGroups/ListGroups views, DeleteGroups and OffsetDelete of
consumer groups, and the conversion of empty groups between classic and consumer."""

from __future__ import annotations

import struct

from coordinator.classic.consumer_protocol import encode_subscription
from coordinator.shard import RequestMeta
from protocol.errors import ErrorCode
from protocol.messages import JoinGroupRequest, OffsetDeleteRequest
from tests.coordinator.modern.harness import Harness, of_type, topic_id

E = ErrorCode


def _group() -> Harness:
    h = Harness()
    h.create_topic("foo", 2)
    h.heartbeat(member_id="a", topics=["foo"], instance="i-a")
    h.heartbeat(member_id="b", regex="f.*")
    return h


def test_consumer_group_describe() -> None:
    h = _group()
    [d] = h.shard.consumer_group_describe(["g"], h.topics)
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch) == (
        0,
        "Reconciling",
        2,
        2,
    )
    assert d.assignor_name == "uniform"
    members = {m.member_id: m for m in d.members}
    assert members["a"].instance_id == "i-a"
    assert members["a"].subscribed_topic_names == ["foo"]
    assert members["b"].subscribed_topic_regex == "f.*"
    [tp] = members["a"].assignment.topic_partitions
    assert (tp.topic_id, tp.topic_name, tp.partitions) == (topic_id("foo"), "foo", [0, 1])
    assert [tp.partitions for tp in members["a"].target_assignment.topic_partitions] == [[0]]
    [missing] = h.shard.consumer_group_describe(["nope"], h.topics)
    assert missing.error_code == E.GROUP_ID_NOT_FOUND


def test_list_and_describe_groups() -> None:
    h = _group()
    [listed] = h.shard.list_groups(None, None)
    assert (listed.group_id, listed.group_type, listed.protocol_type, listed.group_state) == (
        "g",
        "consumer",
        "consumer",
        "Reconciling",
    )
    assert h.shard.list_groups(None, {"classic"}) == []
    assert h.shard.list_groups({"stable"}, None) == []
    assert len(h.shard.list_groups({"RECONCILING"}, {"Consumer"})) == 1
    d = h.shard.describe_group("g", 5)
    assert (d.group_state, d.protocol_type) == ("Reconciling", "consumer")
    a = next(m for m in d.members if m.member_id == "a")
    # ConsumerProtocolAssignment v0: topic "foo" with partitions 0 and 1.
    raw = a.member_assignment
    assert raw[:6] == struct.pack(">hi", 0, 1) and b"foo" in raw
    assert raw.endswith(struct.pack(">iiii", 2, 0, 1, -1))


def test_delete_groups_and_offsets() -> None:
    h = _group()
    h.commit("g", "a", 1, {("foo", 0): 3})
    res = h.apply(h.shard.delete_groups(["g"], h.now)).replies[0]
    assert res[0].error_code == E.NON_EMPTY_GROUP
    for m in ("a", "b"):
        h.heartbeat(member_id=m, epoch=-1, instance="i-a" if m == "a" else None)
    req = OffsetDeleteRequest(
        group_id="g",
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name="foo",
                partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)],
            )
        ],
    )
    meta = RequestMeta(api_version=0, client_id="c", client_host="/h")
    resp = h.apply(h.shard.delete_offsets(req, meta, 99, h.now)).replies[99]
    assert resp.error_code == 0 and resp.topics[0].partitions[0].error_code == 0
    h.commit("g", "", -1, {("foo", 1): 3})
    res = h.apply(h.shard.delete_groups(["g"], h.now)).replies[0]
    assert res[0].error_code == 0
    assert "g" not in of_type(h.shard, "consumer") and h.shard.offsets.of_group("g") == {}
    assert of_type(h.replayed(), "consumer") == {} and of_type(h.replayed(), "classic") == {}


def _classic_join(
    h: Harness, group: str, member_id: str = "", protocol_type: str = "consumer"
) -> object:
    req = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id=member_id,
        protocol_type=protocol_type,
        protocols=[
            JoinGroupRequest.JoinGroupRequestProtocol(
                name="range", metadata=encode_subscription(["foo"])
            )
        ],
    )
    meta = RequestMeta(api_version=5, client_id="c", client_host="/h")
    rid = next(h.ids)
    return h.apply(h.shard.join_group(req, meta, rid, h.now)).replies.get(rid)


def test_classic_and_consumer_groups_convert_when_empty() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    h.create_topic("foo", 2)
    # A classic group with members that do not speak the consumer protocol (Connect, say):
    # the consumer protocol cannot take it over.
    r = _classic_join(h, "g", protocol_type="connect")
    r = _classic_join(h, "g", r.member_id, protocol_type="connect")
    assert h.heartbeat(member_id="x", topics=["foo"]).error_code == E.GROUP_ID_NOT_FOUND
    # A consumer group with members refuses classic members of another protocol type.
    h.heartbeat(group="c", member_id="x", topics=["foo"])
    assert _classic_join(h, "c", protocol_type="connect").error_code == (
        E.INCONSISTENT_GROUP_PROTOCOL
    )
    # Once empty, it becomes a classic group...
    h.heartbeat(group="c", member_id="x", epoch=-1)
    assert _classic_join(h, "c").error_code == E.MEMBER_ID_REQUIRED
    assert "c" not in of_type(h.shard, "consumer") and "c" in of_type(h.shard, "classic")
    # ...and an empty classic group becomes a consumer group again.
    h2 = Harness(initial_rebalance_delay_ms=0)
    h2.create_topic("foo", 2)
    h2.commit("e", "", -1, {("foo", 0): 1})  # a simple group holding offsets
    assert "e" in of_type(h2.shard, "classic")
    assert h2.heartbeat(group="e", member_id="x", topics=["foo"]).error_code == 0
    assert "e" in of_type(h2.shard, "consumer") and "e" not in of_type(h2.shard, "classic")
    assert h2.shard.offsets.get("e", "foo", 0).offset == 1
    replayed = h2.replayed()
    assert "e" in of_type(replayed, "consumer") and "e" not in of_type(replayed, "classic")


def test_migration_policy_disabled_keeps_empty_groups_as_they_are() -> None:
    h = Harness(initial_rebalance_delay_ms=0, consumer_migration_policy="disabled")
    h.create_topic("foo", 2)
    h.heartbeat(group="c", member_id="x", topics=["foo"])
    h.heartbeat(group="c", member_id="x", epoch=-1)
    assert _classic_join(h, "c").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # An empty classic group that had members stays classic too...
    r = _classic_join(h, "k")
    _classic_join(h, "k", r.member_id)
    h.advance(1)
    from protocol.messages import LeaveGroupRequest

    leave = LeaveGroupRequest(
        group_id="k",
        members=[LeaveGroupRequest.MemberIdentity(member_id=r.member_id)],
    )
    meta = RequestMeta(api_version=3, client_id="c", client_host="/h")
    h.apply(h.shard.leave_group(leave, meta, 999, h.now))
    assert h.shard.groups["k"].state.value == "Empty"
    assert h.heartbeat(group="k", member_id="x", topics=["foo"]).error_code == (
        E.GROUP_ID_NOT_FOUND
    )
    # ...but a group that only holds offsets is always replaced.
    h.commit("s", "", -1, {("foo", 0): 1})
    assert h.heartbeat(group="s", member_id="x", topics=["foo"]).error_code == 0


def test_empty_classic_group_becomes_a_consumer_group() -> None:
    from protocol.messages import LeaveGroupRequest

    h = Harness(initial_rebalance_delay_ms=0)
    h.create_topic("foo", 2)
    r = _classic_join(h, "k")
    _classic_join(h, "k", r.member_id)
    leave = LeaveGroupRequest(
        group_id="k", members=[LeaveGroupRequest.MemberIdentity(member_id=r.member_id)]
    )
    meta = RequestMeta(api_version=3, client_id="c", client_host="/h")
    h.apply(h.shard.leave_group(leave, meta, 999, h.now))
    r = h.heartbeat(group="k", member_id="x", topics=["foo"])
    assert r.error_code == 0 and r.member_epoch == 1
    assert "k" not in of_type(h.shard, "classic") and "k" in of_type(h.shard, "consumer")
    replayed = h.replayed()
    assert "k" not in of_type(replayed, "classic") and "k" in of_type(replayed, "consumer")
