"""DescribeGroups, ListGroups, DeleteGroups and OffsetDelete."""

from __future__ import annotations

import pytest

from coordinator.classic.consumer_protocol import encode_subscription, subscribed_topics
from protocol.coordinator_records import GroupMetadataKey, OffsetCommitKey
from protocol.errors import ErrorCode
from protocol.messages import DescribeGroupsResponse
from tests.coordinator.harness import Harness, sub


def test_describe_unknown_group_is_dead_without_error() -> None:
    h = Harness()
    d = h.shard.describe_group("nope", 5)
    assert (d.error_code, d.group_id, d.group_state) == (0, "nope", "Dead")
    assert (d.protocol_type, d.protocol_data, d.members) == ("", "", [])


def test_describe_stable_group_shows_metadata_and_assignments() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    d = h.shard.describe_group("g", 5)
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        0,
        "Stable",
        "consumer",
        "range",
    )
    assert [
        (m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment)
        for m in d.members
    ] == [
        (a, "client", "/127.0.0.1", sub("t"), a.encode()),
        (b, "client", "/127.0.0.1", sub("t"), b.encode()),
    ]


def test_describe_rebalancing_group_hides_metadata() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    h.join("g", a)
    d = h.shard.describe_group("g", 5)
    assert (d.group_state, d.protocol_data) == ("PreparingRebalance", "")
    assert [m.member_metadata for m in d.members] == [b"", b""]
    assert [m.member_id for m in d.members] == [a, b]


def test_describe_static_member_and_empty_group() -> None:
    h = Harness()
    ra = h.join("g", instance="i")
    h.advance(3000)
    d = h.shard.describe_group("g", 4)
    assert d.group_state == "CompletingRebalance"
    assert d.members[0].group_instance_id == "i"
    h.leave("g", [(h.reply(ra).member_id, "i")])
    d = h.shard.describe_group("g", 4)
    assert (d.group_state, d.protocol_type, d.members) == ("Empty", "consumer", [])


@pytest.mark.parametrize("version", range(6))
def test_describe_encodes_in_every_version(version: int) -> None:
    h = Harness()
    h.stable_group(n=1)
    resp = DescribeGroupsResponse(groups=[h.shard.describe_group("g", version)])
    resp.encode(version)


def test_list_groups_with_filters() -> None:
    h = Harness()
    h.stable_group("stable", n=1)
    h.commit("simple", {("t", 0): 1})
    h.join("joining", instance="i")

    def listed(states: set[str] | None = None, types: set[str] | None = None) -> dict:
        return {
            g.group_id: (g.protocol_type, g.group_state, g.group_type)
            for g in h.shard.list_groups(states, types)
        }

    assert listed() == {
        "stable": ("consumer", "Stable", "classic"),
        "simple": ("", "Empty", "classic"),
        "joining": ("consumer", "PreparingRebalance", "classic"),
    }
    assert set(listed({"stable", "EMPTY"})) == {"stable", "simple"}
    assert set(listed({" preparingrebalance "})) == {"joining"}
    assert listed(set(), set()) == listed()
    assert set(listed(types={"Classic"})) == {"stable", "simple", "joining"}
    assert listed(types={"consumer"}) == {}
    assert listed({"Dead"}) == {}


def test_delete_groups() -> None:
    h = Harness()
    h.stable_group("busy", n=1)
    h.commit("idle", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    n = len(h.log)
    results = h.delete_groups(["busy", "missing", "idle", "idle"])
    assert results == {
        "busy": ErrorCode.NON_EMPTY_GROUP,
        "missing": ErrorCode.GROUP_ID_NOT_FOUND,
        "idle": 0,
    }
    assert len(h.last_delete) == 3  # duplicates answered once
    assert h.log[n:] == [
        (OffsetCommitKey(group="idle", topic="t", partition=0), None),
        (OffsetCommitKey(group="idle", topic="t", partition=1), None),
        (OffsetCommitKey(group="idle", topic="u", partition=0), None),
        (GroupMetadataKey(group="idle"), None),
    ]
    assert "idle" not in h.shard.groups
    assert h.fetch("idle") == {}
    assert h.shard.describe_group("idle", 5).group_state == "Dead"


def test_deleting_an_emptied_group() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1)
    h.commit("g", {("t", 0): 5}, member_id=a, generation=gen)
    h.leave("g", [(a, None)])
    assert h.delete_groups(["g"]) == {"g": 0}
    assert "g" not in h.shard.groups


def consumer_group_on(h: Harness, topics: list[str]) -> tuple[list[str], int]:
    return h.stable_group(n=1, protocols=[("range", sub(*topics))])


def test_offset_delete_refuses_subscribed_topics() -> None:
    h = Harness()
    (a,), gen = consumer_group_on(h, ["subscribed"])
    h.commit("g", {("subscribed", 0): 1, ("old", 0): 2, ("old", 1): 3}, member_id=a, generation=gen)
    n = len(h.log)
    resp = h.delete_offsets("g", {"subscribed": [0], "old": [0, 1, 7]})
    assert resp.error_code == 0
    assert {
        (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
    } == {
        ("subscribed", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        ("old", 0): 0,
        ("old", 1): 0,
        ("old", 7): 0,
    }
    # Tombstones only for offsets that exist.
    assert h.log[n:] == [
        (OffsetCommitKey(group="g", topic="old", partition=0), None),
        (OffsetCommitKey(group="g", topic="old", partition=1), None),
    ]
    assert h.fetch("g") == {("subscribed", 0): (1, -1, "", 0)}
    resp.encode(0)


def test_offset_delete_group_errors() -> None:
    h = Harness()
    assert h.delete_offsets("missing", {"t": [0]}).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.delete_offsets("", {"t": [0]}).error_code == ErrorCode.INVALID_GROUP_ID
    h.stable_group("connect", n=1, protocol_type="connect", protocols=[("v1", b"x")])
    assert h.delete_offsets("connect", {"t": [0]}).error_code == ErrorCode.NON_EMPTY_GROUP


def test_offset_delete_on_empty_and_simple_groups() -> None:
    h = Harness()
    h.commit("simple", {("t", 0): 1})
    resp = h.delete_offsets("simple", {"t": [0]})
    assert resp.topics[0].partitions[0].error_code == 0
    assert h.fetch("simple") == {}
    (a,), gen = consumer_group_on(h, ["t"])
    h.commit("g", {("t", 0): 1}, member_id=a, generation=gen)
    h.leave("g", [(a, None)])
    # Once empty, the group subscribes to nothing.
    assert h.delete_offsets("g", {"t": [0]}).topics[0].partitions[0].error_code == 0


def test_offset_delete_with_unparseable_subscription_assumes_subscribed() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1, protocols=[("range", b"\x00")])
    resp = h.delete_offsets("g", {"anything": [0]})
    assert resp.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


def test_subscription_parsing() -> None:
    assert subscribed_topics(encode_subscription(["a", "bb"], version=3, user_data=b"u")) == [
        "a",
        "bb",
    ]
    assert subscribed_topics(encode_subscription([])) == []
    with pytest.raises(ValueError):
        subscribed_topics(b"\x00\x01\x00\x00\x00\x02\x00\x01a")
    with pytest.raises(ValueError):
        subscribed_topics(b"")


def test_describe_v6_says_group_id_not_found_for_unknown_groups() -> None:
    # KIP-1043: from v6 an unknown group is an error with Kafka's message; v0-5 keep Dead.
    h = Harness()
    d = h.shard.describe_group("nope", 6)
    assert (d.error_code, d.error_message, d.group_state) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group nope not found.",
        "Dead",
    )
    h.stable_group(n=1)
    ok = h.shard.describe_group("g", 6)
    assert (ok.error_code, ok.error_message, ok.group_state) == (0, None, "Stable")
    h.commit("simple", {("t", 0): 1})  # a group of offsets only is a classic group
    assert h.shard.describe_group("simple", 6).error_code == 0
    for version in range(7):
        DescribeGroupsResponse(groups=[d, ok]).encode(version)
