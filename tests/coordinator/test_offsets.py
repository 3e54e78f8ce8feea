"""OffsetCommit validation and OffsetFetch (Kafka's OffsetMetadataManagerTest scenarios)."""

from __future__ import annotations

import pytest

from protocol.coordinator_records import OffsetCommitKey, OffsetCommitValue
from protocol.errors import ErrorCode
from protocol.messages import OffsetCommitRequest
from tests.coordinator.harness import Harness

T0 = ("t", 0)


def test_member_commit_writes_one_record_per_partition() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    h.now = 123456
    n = len(h.log)
    errors = h.commit(
        "g",
        {("t", 0): 10, ("t", 1): 11, ("u", 0): 5},
        member_id=a,
        generation=gen,
        metadata="meta",
        leader_epoch=7,
    )
    assert set(errors.values()) == {0}
    assert h.log[n:] == [
        (
            OffsetCommitKey(group="g", topic="t", partition=0),
            OffsetCommitValue(offset=10, leader_epoch=7, metadata="meta", commit_timestamp=123456),
        ),
        (
            OffsetCommitKey(group="g", topic="t", partition=1),
            OffsetCommitValue(offset=11, leader_epoch=7, metadata="meta", commit_timestamp=123456),
        ),
        (
            OffsetCommitKey(group="g", topic="u", partition=0),
            OffsetCommitValue(offset=5, leader_epoch=7, metadata="meta", commit_timestamp=123456),
        ),
    ]
    assert h.fetch("g", [("t", [0, 1]), ("u", [0])]) == {
        ("t", 0): (10, 7, "meta", 0),
        ("t", 1): (11, 7, "meta", 0),
        ("u", 0): (5, 7, "meta", 0),
    }


def test_later_commit_overwrites() -> None:
    h = Harness()
    h.commit("g", {T0: 1})
    h.commit("g", {T0: 2})
    assert h.fetch("g") == {T0: (2, -1, "", 0)}


def test_simple_commit_creates_an_offsets_only_group() -> None:
    h = Harness()
    assert h.commit("simple", {T0: 42}) == {T0: 0}
    group = h.shard.groups["simple"]
    assert str(group.state) == "Empty" and group.protocol_type is None
    assert h.shard.describe_group("simple", 5).group_state == "Empty"
    assert h.fetch("simple") == {T0: (42, -1, "", 0)}
    # No GroupMetadata record: the group exists through its offsets.
    assert [type(k).__name__ for k, _ in h.log] == ["OffsetCommitKey"]


def test_simple_commit_to_an_empty_group() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1)
    h.leave("g", [(a, None)])
    assert h.commit("g", {T0: 1}) == {T0: 0}


def test_simple_commit_to_an_active_group_is_refused() -> None:
    h = Harness()
    h.stable_group(n=1)
    assert h.commit("g", {T0: 1}) == {T0: ErrorCode.UNKNOWN_MEMBER_ID}


@pytest.mark.parametrize("version, error", [(1, 22), (8, 22), (9, ErrorCode.GROUP_ID_NOT_FOUND)])
def test_member_commit_to_unknown_group_depends_on_version(version: int, error: int) -> None:
    h = Harness()
    assert h.commit("nope", {T0: 1}, member_id="m", generation=3, version=version) == {T0: error}
    assert "nope" not in h.shard.groups and h.log == []


def test_commit_validation_matrix() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    assert h.commit("g", {T0: 1}, member_id=a, generation=gen + 1) == {T0: 22}
    assert h.commit("g", {T0: 1}, member_id="nobody", generation=gen) == {T0: 25}
    assert h.commit("g", {T0: 1}, member_id=a, generation=-1) == {T0: 22}
    assert h.commit("g", {T0: 1}, member_id=a, generation=gen, instance="i") == {T0: 25}
    assert h.commit("g", {T0: 1}, member_id=b, generation=gen) == {T0: 0}


def test_commit_from_fenced_static_member() -> None:
    h = Harness()
    la = h.join("g", instance="i")
    h.advance(3000)
    old = h.reply(la).member_id
    h.sync("g", old, 1, {old: b""})
    h.join("g", instance="i")  # the instance restarts: a new member id replaces old
    errors = h.commit("g", {T0: 1}, member_id=old, generation=1, instance="i")
    assert errors == {T0: ErrorCode.FENCED_INSTANCE_ID}


def test_commit_during_completing_rebalance() -> None:
    h = Harness()
    a = h.join_member()
    h.advance(3000)
    gen = h.reply(h.last_join).generation_id
    assert h.commit("g", {T0: 1}, member_id=a, generation=gen) == {T0: 27}


def test_commit_during_preparing_rebalance_with_current_generation() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    h.join("g", a)
    assert str(h.shard.groups["g"].state) == "PreparingRebalance"
    # Members commit before rejoining (onPartitionsRevoked): accepted.
    assert h.commit("g", {T0: 1}, member_id=b, generation=gen) == {T0: 0}


def test_v0_commit_without_member_or_generation() -> None:
    h = Harness()
    assert h.commit("g", {T0: 9}, version=0) == {T0: 0}
    h2 = Harness()
    h2.stable_group(n=1)
    assert h2.commit("g", {T0: 9}, version=0) == {T0: 25}


def test_metadata_too_large_fails_only_that_partition() -> None:
    h = Harness(offset_metadata_max_bytes=10)
    req = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1, committed_metadata="x" * 11
                    ),
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=1, committed_offset=2, committed_metadata="x" * 10
                    ),
                ],
            )
        ],
    )
    rid = next(h.ids)
    h.apply(h.shard.commit_offsets(req, h.meta(8), rid, 0))
    parts = h.reply(rid).topics[0].partitions
    assert [(p.partition_index, p.error_code) for p in parts] == [(0, 12), (1, 0)]
    assert h.fetch("g", [("t", [0, 1])]) == {
        ("t", 0): (-1, -1, "", 0),
        ("t", 1): (2, -1, "x" * 10, 0),
    }


def test_metadata_length_counts_utf16_units() -> None:
    h = Harness(offset_metadata_max_bytes=4)
    # Two astral characters: 2 code points, 4 UTF-16 units, 8 UTF-8 bytes.
    assert h.commit("g", {T0: 1}, metadata="\U0001f600\U0001f600") == {T0: 0}
    assert h.commit("g", {T0: 1}, metadata="\U0001f600\U0001f600a") == {T0: 12}


def test_null_metadata_is_stored_empty() -> None:
    h = Harness()
    h.commit("g", {T0: 1}, metadata=None)
    assert h.log[-1][1].metadata == ""
    assert h.fetch("g") == {T0: (1, -1, "", 0)}


def test_v1_commit_timestamp_is_kept_and_later_versions_use_now() -> None:
    h = Harness()
    h.now = 5000
    h.commit("g", {T0: 1}, version=1, commit_timestamp=1234)
    assert h.log[-1][1].commit_timestamp == 1234
    h.commit("g", {T0: 1}, version=1)
    assert h.log[-1][1].commit_timestamp == 5000
    h.commit("g", {T0: 1}, version=2, commit_timestamp=1234)
    assert h.log[-1][1].commit_timestamp == 5000


def test_v2_to_v4_retention_time_sets_an_expire_timestamp_as_kafka_does() -> None:
    h = Harness()
    h.now = 5000
    h.commit("g", {T0: 1}, version=2, retention=1000)
    assert h.log[-1][1].expire_timestamp == 6000
    h.commit("g", {T0: 1}, version=4, retention=-1)  # the default: the broker's retention
    assert h.log[-1][1].expire_timestamp == -1
    h.commit("g", {T0: 1}, version=5, retention=1000)  # v5 has no such field
    assert h.log[-1][1].expire_timestamp == -1


def test_fetch_unknown_group_and_partitions() -> None:
    h = Harness()
    assert h.fetch("nope", [("t", [0, 1])]) == {
        ("t", 0): (-1, -1, "", 0),
        ("t", 1): (-1, -1, "", 0),
    }
    assert h.fetch("nope") == {}
    h.commit("g", {T0: 3})
    assert h.fetch("g", [("t", [0, 5]), ("other", [0])]) == {
        ("t", 0): (3, -1, "", 0),
        ("t", 5): (-1, -1, "", 0),
        ("other", 0): (-1, -1, "", 0),
    }


def test_fetch_all_partitions_of_a_group() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1, ("t", 1): 2, ("u", 3): 4})
    h.commit("other", {("t", 0): 99})
    assert h.fetch("g") == {
        ("t", 0): (1, -1, "", 0),
        ("t", 1): (2, -1, "", 0),
        ("u", 3): (4, -1, "", 0),
    }


def test_fetch_require_stable_just_answers() -> None:
    h = Harness()
    h.commit("g", {T0: 1})
    assert h.shard.fetch_offsets("g", None, True, 9, 0) == (0, [("t", 0, 1, -1, "", 0)])


@pytest.mark.parametrize("version", range(10))
def test_all_versions_encode(version: int) -> None:
    h = Harness()
    rid = next(h.ids)
    req = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1, committed_metadata=""
                    )
                ],
            )
        ],
    )
    h.apply(h.shard.commit_offsets(req, h.meta(version), rid, 0))
    h.reply(rid).encode(version)


def test_deleting_a_topic_writes_tombstones_for_every_groups_offsets() -> None:
    h = Harness()
    h.commit("a", {("gone", 0): 1, ("gone", 1): 2, ("kept", 0): 3})
    h.commit("b", {("gone", 0): 4})
    h.commit("c", {("kept", 0): 5})
    result = h.apply(h.shard.delete_topic_offsets({"gone"}, h.now))
    assert sorted((k.group, k.topic, k.partition, v) for k, v in result.records) == [
        ("a", "gone", 0, None),
        ("a", "gone", 1, None),
        ("b", "gone", 0, None),
    ]
    assert h.fetch("a") == {("kept", 0): (3, -1, "", 0)}
    assert h.fetch("b") == {}
    assert h.fetch("c") == {("kept", 0): (5, -1, "", 0)}
    assert h.apply(h.shard.delete_topic_offsets({"gone"}, h.now)).records == []


def test_a_deletion_seen_late_keeps_the_offsets_set_since_the_era_it_names() -> None:
    """Cluster mode: a node sees another node's topic deletion at its next catalog read, by
    which time a client may have created the topic again and committed offsets of it here.
    Offsets set before the era of the latest read that still showed the old topic go; those
    set since stay (issue 35's race lost them)."""
    h = Harness()
    h.shard.state.offsets.track(1)
    h.commit("a", {("t", 0): 1, ("t", 1): 2})
    h.shard.state.offsets.begin_era(2)  # a read of the catalog began: it still shows "t"
    h.commit("b", {("t", 0): 7})  # perhaps to the topic created again: kept
    h.commit("a", {("t", 1): 9})
    h.shard.state.offsets.forget_before(2)  # that read completed
    h.shard.state.offsets.begin_era(3)  # the read that finds "t" deleted
    result = h.apply(h.shard.delete_topic_offsets({"t"}, h.now, since=2))
    assert [(k.group, k.topic, k.partition) for k, _ in result.records] == [("a", "t", 0)]
    assert h.fetch("a") == {("t", 1): (9, -1, "", 0)}
    assert h.fetch("b") == {("t", 0): (7, -1, "", 0)}
    # Untracked (one node: its own deletions only), every offset goes whatever the era.
    h = Harness()
    h.commit("a", {("t", 0): 1})
    assert len(h.apply(h.shard.delete_topic_offsets({"t"}, h.now, since=0)).records) == 1
