"""ConsumerGroupHeartbeat on a pure shard with a fake clock: Kafka's scenarios from
GroupMetadataManagerTest (join, leave, fencing, revoke before assign, timeouts)."""

from __future__ import annotations

import pytest

from coordinator.modern.member import MemberState
from protocol.coordinator_records import ConsumerGroupMetadataKey
from protocol.errors import ErrorCode
from tests.coordinator.modern.harness import Harness

E = ErrorCode


@pytest.fixture
def h() -> Harness:
    h = Harness(consumer_session_timeout_ms=45000, consumer_heartbeat_interval_ms=5000)
    h.create_topic("foo", 6)
    h.create_topic("bar", 3)
    return h


def test_first_member_gets_every_partition_and_epoch_1(h: Harness) -> None:
    r = h.heartbeat(member_id="a", topics=["foo", "bar"])
    assert r.error_code == 0
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("a", 1, 5000)
    assert h.names(r.assignment) == {"foo": [0, 1, 2, 3, 4, 5], "bar": [0, 1, 2]}
    g = h.group()
    assert (g.group_epoch, g.assignment_epoch, str(g.state)) == (1, 1, "Stable")
    assert {type(k).__name__ for k, _ in h.log} == {
        "ConsumerGroupMemberMetadataKey",
        "ConsumerGroupPartitionMetadataKey",
        "ConsumerGroupMetadataKey",
        "ConsumerGroupTargetAssignmentMemberKey",
        "ConsumerGroupTargetAssignmentMetadataKey",
        "ConsumerGroupCurrentMemberAssignmentKey",
    }


def test_a_new_group_leaves_epoch_0_even_with_nothing_subscribed(h: Harness) -> None:
    """Kafka 4.x bumps a new group's epoch at its first heartbeat, so the member's epoch is 1
    and a later epoch-0 heartbeat is a rejoin, not the first join again."""
    r = h.heartbeat(member_id="a", topics=[])
    assert (r.error_code, r.member_epoch) == (0, 1)
    assert h.names(r.assignment) == {}
    g = h.group()
    assert (g.group_epoch, g.assignment_epoch, str(g.state)) == (1, 1, "Stable")
    assert h.heartbeat(member_id="a", epoch=1).member_epoch == 1


def test_v0_join_gets_a_coordinator_generated_member_id(h: Harness) -> None:
    r = h.heartbeat(member_id="", topics=["foo"], version=0)
    assert r.error_code == 0 and r.member_id == "u1"


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"group": "", "member_id": "a", "topics": ["foo"]}, E.INVALID_REQUEST),
        ({"group": "  ", "member_id": "a", "topics": ["foo"]}, E.INVALID_REQUEST),
        ({"member_id": "", "topics": ["foo"]}, E.INVALID_REQUEST),  # v1: client-made ids
        ({"member_id": "a", "topics": ["foo"], "instance": " "}, E.INVALID_REQUEST),
        ({"member_id": "a", "epoch": -3}, E.INVALID_REQUEST),
        ({"member_id": "", "epoch": 3, "version": 0}, E.INVALID_REQUEST),
        ({"member_id": "a", "epoch": -2}, E.INVALID_REQUEST),  # static leave needs an instance
        ({"member_id": "a", "topics": ["foo"], "owned": {"foo": [1]}}, E.INVALID_REQUEST),
        ({"member_id": "a", "topics": ["foo"], "assignor": "sticky"}, E.UNSUPPORTED_ASSIGNOR),
        ({"member_id": "a", "regex": "foo(?=x)"}, E.INVALID_REGULAR_EXPRESSION),
        ({"member_id": "a", "regex": "(unclosed"}, E.INVALID_REGULAR_EXPRESSION),
        ({"member_id": "a", "epoch": 1}, E.GROUP_ID_NOT_FOUND),
    ],
)
def test_invalid_requests_are_rejected_without_records(
    h: Harness, kwargs: dict, code: ErrorCode
) -> None:
    r = h.heartbeat(**kwargs)
    assert r.error_code == code, r
    assert r.error_message
    assert h.log == []


def test_join_needs_rebalance_timeout_and_a_subscription(h: Harness) -> None:
    from coordinator.shard import RequestMeta
    from protocol.messages import ConsumerGroupHeartbeatRequest as Req

    meta = RequestMeta(api_version=1, client_id="c", client_host="/h")
    for req in (
        Req(
            group_id="g",
            member_id="a",
            member_epoch=0,
            subscribed_topic_names=["foo"],
            topic_partitions=[],
        ),
        Req(
            group_id="g",
            member_id="a",
            member_epoch=0,
            rebalance_timeout_ms=1000,
            topic_partitions=[],
        ),
        Req(
            group_id="g",
            member_id="a",
            member_epoch=0,
            rebalance_timeout_ms=1000,
            subscribed_topic_names=["foo"],
        ),
    ):
        result = h.shard.consumer_group_heartbeat(req, meta, h.topics, 1, 0)
        assert result.replies[1].error_code == E.INVALID_REQUEST
        assert not result.records


def test_unknown_member_and_fenced_epochs(h: Harness) -> None:
    a = h.heartbeat(member_id="a", topics=["foo"])
    assert h.heartbeat(member_id="zz", epoch=1).error_code == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat(member_id="a", epoch=a.member_epoch + 1).error_code == (
        E.FENCED_MEMBER_EPOCH
    )
    h.heartbeat(member_id="b", topics=["foo"])
    # a moves on to epoch 2 once it has revoked half of its partitions.
    a2 = h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2]})
    assert a2.member_epoch == 2
    # A lost response: a retries with the previous epoch and what it owns; accepted.
    again = h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2]})
    assert (again.error_code, again.member_epoch) == (0, 2)
    # But not while claiming partitions it is no longer assigned.
    bad = h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2, 3]})
    assert bad.error_code == E.FENCED_MEMBER_EPOCH
    # Nor from an epoch older than the previous one.
    assert h.heartbeat(member_id="a", epoch=0 - 0 + 0, topics=["foo"]).error_code == 0


def test_revoke_before_assign(h: Harness) -> None:
    a = h.heartbeat(member_id="a", topics=["foo"])
    assert h.names(a.assignment) == {"foo": [0, 1, 2, 3, 4, 5]}
    b = h.heartbeat(member_id="b", topics=["foo"])
    # b is at the new epoch but gets nothing a still owns.
    assert (b.member_epoch, h.names(b.assignment)) == (2, {})
    assert h.group().members["b"].state is MemberState.UNRELEASED_PARTITIONS
    # a is asked to revoke 3-5 and stays at epoch 1 while it still owns them.
    a = h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2, 3, 4, 5]})
    assert (a.member_epoch, h.names(a.assignment)) == (1, {"foo": [0, 1, 2]})
    assert h.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    b = h.heartbeat(member_id="b", epoch=2, owned={})
    assert b.assignment is None and b.member_epoch == 2  # still waiting
    # a acknowledges the revocation: it reaches epoch 2, then b can take the partitions.
    a = h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2]})
    assert (a.member_epoch, a.assignment) == (2, None)
    b = h.heartbeat(member_id="b", epoch=2, owned={})
    assert h.names(b.assignment) == {"foo": [3, 4, 5]}
    assert str(h.group().state) == "Stable"


def test_heartbeat_is_idempotent_once_reconciled(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo"])
    before = len(h.log)
    for _ in range(3):
        r = h.heartbeat(member_id="a", epoch=1)
        assert (r.error_code, r.member_epoch, r.assignment) == (0, 1, None)
    assert len(h.log) == before
    # A full request (after an error, say) gets the assignment again.
    full = h.heartbeat(
        member_id="a",
        epoch=1,
        topics=["foo"],
        owned={"foo": [0, 1, 2, 3, 4, 5]},
        rebalance_timeout=30000,
    )
    assert h.names(full.assignment) == {"foo": [0, 1, 2, 3, 4, 5]}
    assert len(h.log) == before


def test_rejoin_with_epoch_0_keeps_the_member(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo"])
    r = h.heartbeat(member_id="a", topics=["foo"])
    assert (r.error_code, r.member_epoch) == (0, 1)
    assert h.names(r.assignment) == {"foo": [0, 1, 2, 3, 4, 5]}


def test_leave_moves_partitions_and_bumps_the_epoch(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo"])
    h.heartbeat(member_id="b", topics=["foo"])
    h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2]})
    h.heartbeat(member_id="b", epoch=2, owned={})
    r = h.heartbeat(member_id="b", epoch=-1)
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "b", -1)
    g = h.group()
    assert set(g.members) == {"a"} and g.group_epoch == 3
    a = h.heartbeat(member_id="a", epoch=2, owned={"foo": [0, 1, 2]})
    assert (a.member_epoch, h.names(a.assignment)) == (3, {"foo": [0, 1, 2, 3, 4, 5]})
    assert h.heartbeat(member_id="b", epoch=-1).error_code == E.UNKNOWN_MEMBER_ID
    # Timers of the member are gone.
    assert not [k for k in h.timers if k[2] == "b"]


def test_session_timeout_fences_a_silent_member(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo"])
    h.heartbeat(member_id="b", topics=["foo"])
    epoch, owned = 1, {"foo": [0, 1, 2, 3, 4, 5]}
    for _ in range(5):
        h.advance(30000)
        a = h.heartbeat(member_id="a", epoch=epoch, owned=owned)
        while a.assignment is not None:  # a client acknowledges what it was given at once
            assert a.error_code == 0
            epoch, owned = a.member_epoch, h.names(a.assignment)
            a = h.heartbeat(member_id="a", epoch=epoch, owned=owned)
    g = h.group()
    assert set(g.members) == {"a"}  # b never heartbeat again: fenced after 45s
    assert (epoch, owned) == (3, {"foo": [0, 1, 2, 3, 4, 5]})


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo"], rebalance_timeout=10000)
    h.heartbeat(member_id="b", topics=["foo"])
    h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2, 3, 4, 5]})  # must revoke
    for _ in range(2):  # keeps heartbeating, never revokes
        h.advance(4000)
        h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2, 3, 4, 5]})
        assert h.heartbeat(member_id="b", epoch=2, owned={}).assignment is None
    h.advance(4000)
    assert "a" not in h.group().members
    assert h.heartbeat(member_id="a", epoch=1).error_code == E.UNKNOWN_MEMBER_ID
    b = h.heartbeat(member_id="b", epoch=2, owned={})
    assert b.member_epoch == 3
    assert h.names(b.assignment) == {"foo": [0, 1, 2, 3, 4, 5]}


def test_rebalance_timer_is_cancelled_once_revoked(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo"], rebalance_timeout=10000)
    h.heartbeat(member_id="b", topics=["foo"])
    h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2, 3, 4, 5]})
    assert ("cg-rebalance", "g", "a") in h.timers
    h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1, 2]})
    assert ("cg-rebalance", "g", "a") not in h.timers
    h.advance(20000)
    assert "a" in h.group().members


def test_subscription_change_bumps_the_epoch_and_reassigns(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo"])
    r = h.heartbeat(member_id="a", epoch=1, topics=["foo", "bar"])
    assert r.member_epoch == 2
    assert h.names(r.assignment) == {"foo": [0, 1, 2, 3, 4, 5], "bar": [0, 1, 2]}
    r = h.heartbeat(member_id="a", epoch=2, topics=["bar"], owned={"foo": [0, 1, 2, 3, 4, 5]})
    # foo must be revoked first.
    assert (r.member_epoch, h.names(r.assignment)) == (2, {"bar": [0, 1, 2]})
    r = h.heartbeat(member_id="a", epoch=2, owned={"bar": [0, 1, 2]})
    assert r.member_epoch == 3
    assert set(h.group().subscription_metadata) == {"bar"}


def test_new_partitions_and_topics_bump_the_epoch(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo", "later"])
    assert h.group().group_epoch == 1
    h.create_topic("foo", 8)
    r = h.heartbeat(member_id="a", epoch=1)
    assert r.member_epoch == 2
    assert h.names(r.assignment) == {"foo": list(range(8))}
    h.create_topic("later", 2)
    r = h.heartbeat(member_id="a", epoch=2)
    assert r.member_epoch == 3
    assert h.names(r.assignment) == {"foo": list(range(8)), "later": [0, 1]}
    # A change to a topic nobody subscribes to changes nothing.
    h.create_topic("other", 4)
    r = h.heartbeat(member_id="a", epoch=3)
    assert (r.member_epoch, r.assignment) == (3, None)


def test_deleted_topic_is_revoked(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo", "bar"])
    h.delete_topic("bar")
    r = h.heartbeat(member_id="a", epoch=1, owned={"foo": list(range(6))})
    assert r.member_epoch == 2
    assert [tp.partitions for tp in r.assignment.topic_partitions] == [list(range(6))]


def test_regex_subscription_follows_new_topics(h: Harness) -> None:
    r = h.heartbeat(member_id="a", regex="fo.*")
    assert h.names(r.assignment) == {"foo": list(range(6))}
    regex_records = [v for k, v in h.log if type(k).__name__.startswith("ConsumerGroupRegular")]
    assert regex_records and regex_records[-1].topics == ["foo"]
    h.create_topic("fox", 2)
    h.create_topic("xfoo", 2)  # the whole name must match
    r = h.heartbeat(member_id="a", epoch=1)
    assert r.member_epoch == 2
    assert h.names(r.assignment) == {"foo": list(range(6)), "fox": [0, 1]}
    # Leaving the regex for plain names drops the resolution.
    r = h.heartbeat(member_id="a", epoch=2, regex="", topics=["bar"])
    assert h.group().regexes == {}


def test_posix_classes_in_regex(h: Harness) -> None:
    h.create_topic("t1", 1)
    r = h.heartbeat(member_id="a", regex="t[[:digit:]]+")
    assert h.names(r.assignment) == {"t1": [0]}


def test_group_max_size(h: Harness) -> None:
    h2 = Harness(consumer_max_size=2)
    h2.create_topic("foo", 2)
    assert h2.heartbeat(member_id="a", topics=["foo"]).error_code == 0
    assert h2.heartbeat(member_id="b", topics=["foo"]).error_code == 0
    r = h2.heartbeat(member_id="c", topics=["foo"])
    assert r.error_code == E.GROUP_MAX_SIZE_REACHED
    assert h2.heartbeat(member_id="a", epoch=1).error_code == 0


def test_server_assignor_preference(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo"], assignor="range")
    h.heartbeat(member_id="b", topics=["foo"], assignor="range")
    g = h.group()
    assert g.preferred_assignor(None, None) == "range"
    assert {m: h.names(a) for m, a in g.target.items()} == {
        "a": {"foo": [0, 1, 2]},
        "b": {"foo": [3, 4, 5]},
    }


def test_epoch_records_only_on_bumps(h: Harness) -> None:
    h.heartbeat(member_id="a", topics=["foo"])
    h.heartbeat(member_id="a", epoch=1, client_id="other")  # metadata only
    epochs = [v.epoch for k, v in h.log if isinstance(k, ConsumerGroupMetadataKey)]
    assert epochs == [1]
