"""Share groups on the group-coordinator side: ShareGroupHeartbeat membership and epochs, the
simple assignor sharing partitions, fencing, replay, describe/list and the refusals of the
offset APIs and DescribeGroups."""

from __future__ import annotations

from typing import Any

from coordinator.modern.topics_image import TopicMeta
from coordinator.shard import RequestMeta
from coordinator.share.assignor import assign
from protocol.errors import ErrorCode
from protocol.messages import ShareGroupHeartbeatRequest
from tests.coordinator.modern.harness import Harness, of_type, topic_id

E = ErrorCode


def beat(
    h: Harness,
    member_id: str,
    epoch: int = 0,
    topics: list[str] | None = None,
    group: str = "sg",
    rack: str | None = None,
) -> Any:
    if epoch == 0 and topics is None:
        topics = ["t"]
    req = ShareGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        rack_id=rack,
        subscribed_topic_names=topics,
    )
    rid = next(h.ids)
    meta = RequestMeta(api_version=1, client_id="share-client", client_host="/127.0.0.1")
    return h.apply(h.shard.share_group_heartbeat(req, meta, h.topics, rid, h.now)).replies[rid]


def _harness(partitions: int = 1) -> Harness:
    h = Harness(share_session_timeout_ms=10000, share_heartbeat_interval_ms=1000)
    h.create_topic("t", partitions)
    return h


def test_members_share_one_partition() -> None:
    h = _harness(1)
    epochs = {}
    for m in ("a", "b", "c"):
        r = beat(h, m)
        assert r.error_code == 0 and r.heartbeat_interval_ms == 1000, r
        epochs[m] = r.member_epoch
    # Each heartbeat moves the member to the current target: everyone reads partition 0.
    for m in ("a", "b", "c"):
        r = beat(h, m, epochs[m])
        assert r.error_code == 0
        epochs[m] = r.member_epoch
    g = of_type(h.shard, "share")["sg"]
    assert {m: h.names(g.members[m].assigned) for m in g.members} == {m: {"t": [0]} for m in "abc"}
    assert str(g.state) == "Stable" and g.group_epoch == 3


def test_more_partitions_than_members_are_split() -> None:
    h = _harness(4)
    beat(h, "a")
    r = beat(h, "b")
    a = beat(h, "a", of_type(h.shard, "share")["sg"].members["a"].member_epoch)
    assert h.names(a.assignment) == {"t": [0, 2]}
    assert h.names(r.assignment) == {"t": [1, 3]}


def test_assignor_covers_every_partition_and_balances() -> None:
    topics = {"x": TopicMeta(topic_id("x"), "x", 3), "y": TopicMeta(topic_id("y"), "y", 2)}
    subs = {f"m{i}": frozenset({"x", "y"} if i % 2 else {"x"}) for i in range(5)}
    out = assign(subs, topics)
    for name, meta in topics.items():
        readers = [m for m, a in out.items() if a.get(meta.topic_id)]
        covered = set().union(*(out[m].get(meta.topic_id, frozenset()) for m in readers))
        assert covered == set(range(meta.partitions)), name
        assert all(name in subs[m] for m in readers)
    # Five members on 3 partitions of x: one partition each, 1 or 2 readers per partition.
    per_member = [len(a.get(topic_id("x"), ())) for a in out.values()]
    assert per_member == [1] * 5


def test_errors_epochs_and_leaving() -> None:
    h = _harness(1)
    r = beat(h, "a")
    assert beat(h, "", 0).error_code == E.INVALID_REQUEST
    assert beat(h, "a", 0, topics=[]).error_code == E.INVALID_REQUEST
    assert beat(h, "z", 5).error_code == E.UNKNOWN_MEMBER_ID
    assert beat(h, "a", r.member_epoch + 1).error_code == E.FENCED_MEMBER_EPOCH
    # The previous epoch is accepted (a lost response), an older one is not.
    beat(h, "b")
    a = beat(h, "a", r.member_epoch)
    assert a.member_epoch == r.member_epoch + 1
    assert beat(h, "a", r.member_epoch).member_epoch == a.member_epoch
    beat(h, "b", -1)
    a2 = beat(h, "a", a.member_epoch)
    assert a2.member_epoch == a.member_epoch + 1
    assert beat(h, "a", r.member_epoch).error_code == E.FENCED_MEMBER_EPOCH
    assert beat(h, "a", -2).error_code == E.INVALID_REQUEST
    left = beat(h, "a", -1)
    assert (left.error_code, left.member_epoch) == (0, -1)
    g = of_type(h.shard, "share")["sg"]
    assert g.members == {} and str(g.state) == "Empty"
    # Another kind of group with that id: not a share group.
    h.heartbeat(group="cg", member_id="x", topics=["t"])
    assert beat(h, "a", group="cg").error_code == E.GROUP_ID_NOT_FOUND


def test_session_timeout_fences_and_replay_rebuilds() -> None:
    h = _harness(2)
    beat(h, "a")
    r = beat(h, "b")
    for _ in range(3):
        h.advance(4000)
        r = beat(h, "b", r.member_epoch)
    g = of_type(h.shard, "share")["sg"]
    assert set(g.members) == {"b"}
    assert h.names(g.members["b"].assigned) == {"t": [0, 1]}
    replayed = of_type(h.replayed(), "share")["sg"]
    assert set(replayed.members) == {"b"}
    assert (replayed.group_epoch, replayed.assignment_epoch) == (g.group_epoch, g.assignment_epoch)
    assert replayed.members["b"] == g.members["b"] and replayed.target == g.target


def test_describe_list_delete_and_refusals() -> None:
    h = _harness(1)
    beat(h, "a", rack="r1")
    [d] = h.shard.share_group_describe(["sg"], h.topics)
    assert (d.error_code, d.group_state, d.assignor_name) == (0, "Stable", "simple")
    [m] = d.members
    assert (m.member_id, m.rack_id, m.subscribed_topic_names) == ("a", "r1", ["t"])
    [missing] = h.shard.share_group_describe(["nope"], h.topics)
    assert missing.error_code == E.GROUP_ID_NOT_FOUND
    [listed] = h.shard.list_groups(None, {"share"})
    assert (listed.group_id, listed.group_type, listed.protocol_type) == ("sg", "share", "share")
    assert h.shard.describe_group("sg", 5).group_state == "Dead"
    assert h.commit("sg", "a", 1, {("t", 0): 1}) == {("t", 0): E.GROUP_ID_NOT_FOUND}
    # Only an empty share group can be deleted; its records go.
    res = h.apply(h.shard.delete_groups(["sg"], h.now)).replies[0]
    assert res[0].error_code == E.NON_EMPTY_GROUP
    beat(h, "a", -1)
    res = h.apply(h.shard.delete_groups(["sg"], h.now)).replies[0]
    assert res[0].error_code == 0
    assert "sg" not in h.shard.groups and "sg" not in h.replayed().groups


def test_a_group_config_overrides_the_session_timeout_and_heartbeat_interval() -> None:
    per_group: dict[str, dict[str, str]] = {}
    h = Harness(
        share_session_timeout_ms=10000, share_heartbeat_interval_ms=1000, per_group=per_group
    )
    h.create_topic("t", 1)
    assert beat(h, "a", group="plain").heartbeat_interval_ms == 1000
    # Set after the groups exist, as IncrementalAlterConfigs does: the next heartbeat uses it.
    per_group["tuned"] = {
        "share.session.timeout.ms": "30000",
        "share.heartbeat.interval.ms": "3000",
    }
    r = beat(h, "b", group="tuned")
    assert r.heartbeat_interval_ms == 3000
    h.advance(20000)  # past the broker's 10 s, within the group's 30 s
    assert set(of_type(h.shard, "share")["plain"].members) == set()
    assert set(of_type(h.shard, "share")["tuned"].members) == {"b"}
    h.advance(11000)
    assert set(of_type(h.shard, "share")["tuned"].members) == set()


def test_describe_groups_v6_refuses_a_share_group() -> None:
    h = _harness(1)
    beat(h, "a")
    d = h.shard.describe_group("sg", 6)
    assert (d.error_code, d.error_message) == (
        E.GROUP_ID_NOT_FOUND,
        "Group sg is not a classic group.",
    )
