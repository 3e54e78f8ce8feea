"""Offset commits of consumer groups: member epochs (KIP-1251 assignment epochs), versions,
and expiration."""

from __future__ import annotations

from protocol.errors import ErrorCode
from tests.coordinator.modern.harness import Harness, of_type

E = ErrorCode


def _two_members() -> Harness:
    h = Harness()
    h.create_topic("foo", 4)
    h.heartbeat(member_id="a", topics=["foo"])  # a: 0-3 at epoch 1
    h.heartbeat(member_id="b", topics=["foo"])  # group epoch 2
    h.heartbeat(member_id="a", epoch=1, owned={"foo": [0, 1]})  # a: 0-1 at epoch 2
    h.heartbeat(member_id="b", epoch=2, owned={})  # b: 2-3, assigned at epoch 2
    return h


def test_commit_with_current_epoch() -> None:
    h = _two_members()
    assert h.commit("g", "a", 2, {("foo", 0): 10, ("foo", 1): 11}) == {
        ("foo", 0): 0,
        ("foo", 1): 0,
    }
    assert h.shard.offsets.get("g", "foo", 0).offset == 10


def test_commit_with_an_older_epoch_for_partitions_held_since() -> None:
    h = _two_members()
    # a got 0 and 1 at epoch 1 and still holds them: a commit from epoch 1 is fine.
    assert h.commit("g", "a", 1, {("foo", 0): 5}) == {("foo", 0): 0}
    # b got 2-3 at epoch 2: a commit claiming epoch 1 is stale for them...
    assert h.commit("g", "b", 1, {("foo", 2): 5}) == {("foo", 2): E.STALE_MEMBER_EPOCH}
    # ...and a does not hold partition 3 at all.
    assert h.commit("g", "a", 1, {("foo", 3): 5, ("foo", 1): 6}) == {
        ("foo", 3): E.STALE_MEMBER_EPOCH,
        ("foo", 1): 0,
    }
    assert h.shard.offsets.get("g", "foo", 3) is None


def test_commit_rejections() -> None:
    h = _two_members()
    assert set(h.commit("g", "a", 3, {("foo", 0): 1}).values()) == {E.STALE_MEMBER_EPOCH}
    assert set(h.commit("g", "zz", 2, {("foo", 0): 1}).values()) == {E.UNKNOWN_MEMBER_ID}
    assert set(h.commit("g", "a", 2, {("foo", 0): 1}, version=8).values()) == {
        E.UNSUPPORTED_VERSION
    }
    # The admin client may not commit while members are there...
    assert set(h.commit("g", "", -1, {("foo", 0): 1}).values()) == {E.UNKNOWN_MEMBER_ID}


def test_admin_commit_to_an_empty_group_and_fetch() -> None:
    h = _two_members()
    h.heartbeat(member_id="a", epoch=-1)
    h.heartbeat(member_id="b", epoch=-1)
    assert h.commit("g", "", -1, {("foo", 0): 7}) == {("foo", 0): 0}
    code, rows = h.shard.fetch_offsets("g", None, False, 9, h.now)
    assert (code, rows) == (0, [("foo", 0, 7, -1, "", 0)])


def test_offsets_of_unsubscribed_topics_expire_and_an_empty_group_goes() -> None:
    h = Harness(offsets_retention_ms=1000)
    h.create_topic("foo", 1)
    h.create_topic("bar", 1)
    h.heartbeat(member_id="a", topics=["foo"])
    assert h.commit("g", "a", 1, {("foo", 0): 1}) == {("foo", 0): 0}
    assert h.commit("g", "", -1, {("bar", 0): 1}) == {("bar", 0): E.UNKNOWN_MEMBER_ID}
    h.heartbeat(member_id="a", epoch=1, topics=["foo", "bar"])
    assert h.commit("g", "a", 2, {("bar", 0): 1}) == {("bar", 0): 0}
    h.heartbeat(member_id="a", epoch=2, topics=["foo"], owned={"foo": [0], "bar": [0]})
    h.heartbeat(member_id="a", epoch=2, owned={"foo": [0]})
    h.advance(2000)
    h.apply(h.shard.expire_offsets(h.now))
    assert h.shard.offsets.get("g", "bar", 0) is None  # no longer subscribed
    assert h.shard.offsets.get("g", "foo", 0) is not None
    h.heartbeat(
        member_id="a",
        epoch=3,
    )
    h.heartbeat(member_id="a", epoch=-1)
    h.advance(2000)
    h.apply(h.shard.expire_offsets(h.now))
    assert "g" not in of_type(h.shard, "consumer") and "g" not in of_type(h.shard, "classic")
    assert of_type(h.replayed(), "consumer") == {}


def test_fetch_by_a_member_checks_its_epoch() -> None:
    """OffsetFetch v9 (ConsumerGroup.validateOffsetFetch): a member id must name a member, at
    its current epoch; no member id and epoch -1 (the admin client) is always accepted."""
    h = _two_members()
    assert h.commit("g", "a", 2, {("foo", 0): 10}) == {("foo", 0): 0}

    def fetch(member_id: str | None, epoch: int) -> tuple[int, list]:
        return h.shard.fetch_offsets("g", [("foo", [0])], False, 9, h.now, member_id, epoch)

    assert fetch("a", 2) == (0, [("foo", 0, 10, -1, "", 0)])
    assert fetch(None, -1) == (0, [("foo", 0, 10, -1, "", 0)])
    assert fetch("a", 1) == (E.STALE_MEMBER_EPOCH, [])
    assert fetch("a", 3) == (E.STALE_MEMBER_EPOCH, [])
    assert fetch("zz", 2) == (E.UNKNOWN_MEMBER_ID, [])
    assert fetch("", -1) == (E.UNKNOWN_MEMBER_ID, [])
    # Classic groups and unknown groups take no member check.
    assert h.shard.fetch_offsets("other", None, False, 9, h.now, "x", 5) == (0, [])
