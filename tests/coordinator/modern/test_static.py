"""Static members (instance ids): a temporary leave keeps the assignment for the instance, a
rejoin under a new member id reclaims it without a rebalance."""

from __future__ import annotations

from protocol.errors import ErrorCode
from tests.coordinator.modern.harness import Harness


def _setup() -> Harness:
    h = Harness(consumer_session_timeout_ms=45000)
    h.create_topic("foo", 4)
    h.heartbeat(member_id="a1", topics=["foo"], instance="A")
    h.heartbeat(member_id="b", topics=["foo"])
    h.heartbeat(member_id="a1", epoch=1, owned={"foo": [0, 1]}, instance="A")
    h.heartbeat(member_id="b", epoch=2, owned={}, instance=None)
    return h


def test_static_member_rejoins_with_its_assignment() -> None:
    h = _setup()
    g = h.group()
    assert h.names(g.members["a1"].assigned) == {"foo": [0, 1]}
    epoch = g.group_epoch
    r = h.heartbeat(member_id="a1", epoch=-2, instance="A")
    assert (r.error_code, r.member_epoch) == (0, -2)
    assert g.members["a1"].member_epoch == -2
    # The partitions stay with the instance: nobody else gets them meanwhile.
    assert h.group().current_partition_epoch(next(iter(g.members["a1"].assigned)), 0) == -2
    r = h.heartbeat(member_id="a2", topics=["foo"], instance="A")
    assert r.error_code == 0
    assert h.names(r.assignment) == {"foo": [0, 1]}
    g = h.group()
    assert set(g.members) == {"a2", "b"} and g.static_members == {"A": "a2"}
    assert g.group_epoch == epoch  # no rebalance
    assert r.member_epoch == epoch


def test_instance_id_in_use_is_unreleased() -> None:
    h = _setup()
    r = h.heartbeat(member_id="a2", topics=["foo"], instance="A")
    assert r.error_code == ErrorCode.UNRELEASED_INSTANCE_ID


def test_an_epoch_0_rejoin_under_the_same_member_id_is_unreleased_until_it_leaves() -> None:
    """As Kafka 4.x answers: the instance is still owned, whatever the member id."""
    h = _setup()
    r = h.heartbeat(member_id="a1", topics=["foo"], instance="A")
    assert r.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert h.heartbeat(member_id="a1", epoch=-2, instance="A").error_code == 0
    r = h.heartbeat(member_id="a1", topics=["foo"], instance="A")
    assert r.error_code == 0
    assert h.names(r.assignment) == {"foo": [0, 1]}


def test_wrong_member_for_instance_is_fenced() -> None:
    h = _setup()
    epoch = h.group().members["a1"].member_epoch
    r = h.heartbeat(member_id="zz", epoch=epoch, instance="A")
    assert r.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat(member_id="zz", epoch=1, instance="Q").error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )


def test_static_member_that_does_not_return_is_removed() -> None:
    h = _setup()
    h.heartbeat(member_id="a1", epoch=-2, instance="A")
    for _ in range(4):
        h.advance(20000)
        epoch = h.group().members["b"].member_epoch
        h.heartbeat(member_id="b", epoch=epoch, owned={"foo": [2, 3]})
    g = h.group()
    assert set(g.members) == {"b"} and g.static_members == {}
    assert h.names(g.members["b"].assigned) == {"foo": [0, 1, 2, 3]}


def test_static_member_leaving_for_good() -> None:
    h = _setup()
    r = h.heartbeat(member_id="a1", epoch=-1, instance="A")
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert set(h.group().members) == {"b"}
