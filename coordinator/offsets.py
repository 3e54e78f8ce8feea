"""Committed offsets: the store, and OffsetCommit / OffsetFetch / OffsetDelete / expiration as
Kafka's OffsetMetadataManager does them."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from coordinator.classic.group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicGroup,
)
from coordinator.classic.rebalance import reschedule_heartbeat
from coordinator.context import Ctx
from coordinator.keys import group_record_key, offset_record_key
from coordinator.modern.commit import validate_commit as validate_consumer_commit
from coordinator.modern.commit import validate_fetch as validate_consumer_fetch
from coordinator.modern.membership import delete_group_and_offsets
from protocol.coordinator_records import OffsetCommitKey, OffsetCommitValue
from protocol.errors import ErrorCode
from protocol.messages import OffsetCommitResponse, OffsetDeleteResponse

# OffsetCommit v9+ answers GROUP_ID_NOT_FOUND for a member commit to an unknown group; older
# versions keep ILLEGAL_GENERATION, which their clients understand.
GROUP_ID_NOT_FOUND_VERSION = 9
# Only OffsetCommit v1 carries a per-partition commit timestamp.
COMMIT_TIMESTAMP_VERSION = 1


class OffsetStore:
    """group -> topic -> partition -> committed offset, in commit order.

    The OffsetCommit record values are kept as they are (offset, leader_epoch, metadata,
    commit_timestamp, expire_timestamp): records are never changed once written."""

    def __init__(self) -> None:
        self.by_group: dict[str, dict[str, dict[int, OffsetCommitValue]]] = {}

    def _partitions(self, group: str, topic: str) -> dict[int, OffsetCommitValue]:
        topics = self.by_group.get(group)
        if topics is None:
            topics = self.by_group[group] = {}
        partitions = topics.get(topic)
        if partitions is None:
            partitions = topics[topic] = {}
        return partitions

    def put_records(self, group: str, topic: str, records: list[tuple[Any, Any]]) -> None:
        """`replay` of OffsetCommit records of one group and topic, none a tombstone."""
        partitions = self._partitions(group, topic)
        for key, value in records:
            partitions[key.partition] = value

    def remove(self, group: str, topic: str, partition: int) -> None:
        topics = self.by_group.get(group)
        if topics is None:
            return
        partitions = topics.get(topic)
        if partitions is None:
            return
        partitions.pop(partition, None)
        if not partitions:
            del topics[topic]
            if not topics:
                del self.by_group[group]

    def get(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        return self.by_group.get(group, {}).get(topic, {}).get(partition)

    def of_group(self, group: str) -> dict[str, dict[int, OffsetCommitValue]]:
        return self.by_group.get(group, {})

    def replay(self, key: Any, value: Any | None) -> None:
        if value is None:
            self.remove(key.group, key.topic, key.partition)
        else:
            self._partitions(key.group, key.topic)[key.partition] = value


def _utf16_len(s: str) -> int:
    # Kafka bounds String.length(): UTF-16 code units, not bytes.
    return len(s.encode("utf-16-le")) // 2


def _validate_commit(ctx: Ctx, req: Any, version: int) -> tuple[ErrorCode, Any]:
    """(group-level error, per-partition check (topic, partition) -> error, or None)."""
    generation = req.generation_id_or_member_epoch
    consumer = ctx.shard.consumer_groups.get(req.group_id)
    if consumer is not None:
        return validate_consumer_commit(consumer, req.member_id, generation, version)
    return _validate_classic_commit(ctx, req, version), None


def _validate_classic_commit(ctx: Ctx, req: Any, version: int) -> ErrorCode:
    group = ctx.shard.groups.get(req.group_id)
    generation = req.generation_id_or_member_epoch
    if group is None:
        if generation < 0:
            # A "simple" commit (admin client, or a consumer assigning partitions itself): the
            # group comes into being, holding only offsets, when the first record is applied.
            return ErrorCode.NONE
        if version >= GROUP_ID_NOT_FOUND_VERSION:
            return ErrorCode.GROUP_ID_NOT_FOUND
        return ErrorCode.ILLEGAL_GENERATION
    return validate_offset_commit(group, req.member_id, req.group_instance_id, generation)


def validate_offset_commit(
    group: ClassicGroup, member_id: str, instance_id: str | None, generation: int
) -> ErrorCode:
    """Kafka's ClassicGroup.validateOffsetCommit for a non-transactional commit."""
    if group.state is DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.state is EMPTY:
        return ErrorCode.NONE
    if generation >= 0 or member_id != "" or instance_id is not None:
        error = group.validate_member(member_id, instance_id)
        if error != ErrorCode.NONE:
            return error
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
    elif group.state is not EMPTY:
        # No member id and no generation (v0, or a simple commit): only an empty group
        # accepts it, or it would overwrite what the members commit.
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group.state is COMPLETING_REBALANCE:
        # The member has its new generation but not yet its assignment: let it finish the
        # rebalance and commit afterwards.
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def commit_error_response(topics: Iterable[Any], code: int) -> OffsetCommitResponse:
    """The OffsetCommit reply that gives every partition of the request's `topics` one error."""
    Topic = OffsetCommitResponse.OffsetCommitResponseTopic
    Partition = OffsetCommitResponse.OffsetCommitResponsePartition
    return OffsetCommitResponse(
        topics=[
            Topic(
                name=t.name,
                partitions=[
                    Partition(partition_index=p.partition_index, error_code=int(code))
                    for p in t.partitions
                ],
            )
            for t in topics
        ]
    )


def commit_offsets(ctx: Ctx, req: Any, meta: Any, req_id: int) -> None:
    version = meta.api_version
    Topic = OffsetCommitResponse.OffsetCommitResponseTopic
    Partition = OffsetCommitResponse.OffsetCommitResponsePartition
    make_topic = Topic.make
    error, check = _validate_commit(ctx, req, version)
    if error != ErrorCode.NONE:
        ctx.reply(req_id, commit_error_response(req.topics, error))
        return

    group = ctx.shard.groups.get(req.group_id)
    if group is not None and group.state in (STABLE, PREPARING_REBALANCE):
        # A commit from a member counts as a sign of life, as in Kafka.
        member = group.members.get(req.member_id)
        if member is not None:
            reschedule_heartbeat(ctx, group, member)

    max_len = ctx.config.offset_metadata_max_bytes
    half = max_len // 2
    group_id = req.group_id
    now = ctx.now
    with_timestamps = version == COMMIT_TIMESTAMP_VERSION
    # The hot loop of every commit: names bound once, objects built positionally.
    make_key, make_value, make_partition = (
        OffsetCommitKey.make,
        OffsetCommitValue.make,
        Partition.make,
    )
    topics = []
    for t in req.topics:
        name = t.name
        partitions = []
        add = partitions.append
        records: list[tuple[Any, Any]] = []
        write = records.append
        for p in t.partitions:
            index = p.partition_index
            if check is not None:
                code = check(name, index)
                if code != ErrorCode.NONE:
                    add(make_partition(index, code))
                    continue
            metadata = p.committed_metadata
            if metadata is None:
                metadata = ""
            elif len(metadata) > half and _utf16_len(metadata) > max_len:
                add(make_partition(index, int(ErrorCode.OFFSET_METADATA_TOO_LARGE)))
                continue
            # retention_time_ms (v2-4) is ignored, as Kafka 4 does: offsets expire by the
            # broker's offsets.retention.minutes only.
            ts = p.commit_timestamp if with_timestamps and p.commit_timestamp != -1 else now
            write(
                (
                    make_key(group_id, name, index),
                    # offset, leader epoch, metadata, commit timestamp, no expire timestamp
                    make_value(p.committed_offset, p.committed_leader_epoch, metadata, ts, -1),
                )
            )
            add(make_partition(index, 0))
        if records:
            ctx.append_offset_commits(group_id, name, records)
        topics.append(make_topic(name, partitions))
    ctx.reply(req_id, OffsetCommitResponse(topics=topics))


OffsetRow = tuple[str, int, int, int, str, int]


def fetch_offsets(
    shard: Any,
    group_id: str,
    topics: list[tuple[str, list[int]]] | None,
    member_id: str | None = None,
    member_epoch: int = -1,
) -> tuple[int, list[OffsetRow]]:
    """(group error, [(topic, partition, offset, leader epoch, metadata, error)]).

    An unknown group, or a partition without a commit, reads as offset -1 with no error; a
    group that does not exist has no partitions when all are asked for. A consumer group
    checks the member (OffsetFetch v9+) first: an unknown member or a stale epoch is a group
    error and no offsets.
    """
    group = shard.groups.get(group_id)
    consumer = shard.consumer_groups.get(group_id)
    if consumer is not None:
        error = validate_consumer_fetch(consumer, member_id, member_epoch)
        if error != ErrorCode.NONE:
            return int(error), []
    known = (group is not None and group.state is not DEAD) or consumer is not None
    committed = shard.offsets.of_group(group_id) if known else {}
    rows: list[OffsetRow] = []
    if topics is None:
        for topic, partitions in committed.items():
            for partition, om in partitions.items():
                rows.append((topic, partition, om.offset, om.leader_epoch, om.metadata, 0))
        return 0, rows
    for topic, partition_ids in topics:
        partitions = committed.get(topic, {})
        for partition in partition_ids:
            om = partitions.get(partition)
            if om is None:
                rows.append((topic, partition, -1, -1, "", 0))
            else:
                rows.append((topic, partition, om.offset, om.leader_epoch, om.metadata, 0))
    return 0, rows


def delete_offsets(ctx: Ctx, req: Any, meta: Any, req_id: int) -> None:
    def fail(error: ErrorCode) -> None:
        ctx.reply(req_id, OffsetDeleteResponse(error_code=int(error)))

    if not req.group_id:
        return fail(ErrorCode.INVALID_GROUP_ID)
    consumer = ctx.shard.consumer_groups.get(req.group_id)
    if consumer is not None:
        # A consumer group knows its subscriptions: offsets of other topics may go.
        return _delete_offsets(ctx, req, req_id, consumer)
    group = ctx.shard.groups.get(req.group_id)
    if group is None or group.state is DEAD:
        return fail(ErrorCode.GROUP_ID_NOT_FOUND)
    if group.state is not EMPTY and not group.uses_consumer_protocol():
        # Without the consumer protocol we cannot tell which topics the members read.
        return fail(ErrorCode.NON_EMPTY_GROUP)
    return _delete_offsets(ctx, req, req_id, group)


def _delete_offsets(ctx: Ctx, req: Any, req_id: int, group: Any) -> None:
    Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
    Partition = OffsetDeleteResponse.OffsetDeleteResponsePartition
    store = ctx.shard.offsets
    topics = []
    for t in req.topics:
        if group.is_subscribed_to_topic(t.name):
            code = int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
            partitions = [
                Partition(partition_index=p.partition_index, error_code=code) for p in t.partitions
            ]
        else:
            partitions = []
            for p in t.partitions:
                partitions.append(Partition(partition_index=p.partition_index, error_code=0))
                if store.get(req.group_id, t.name, p.partition_index) is not None:
                    ctx.append(offset_record_key(req.group_id, t.name, p.partition_index), None)
        topics.append(Topic(name=t.name, partitions=partitions))
    ctx.reply(req_id, OffsetDeleteResponse(error_code=0, topics=topics))


def _expiration_base(group: ClassicGroup, om: OffsetCommitValue) -> int | None:
    """Kafka's offsetExpirationCondition: the time an offset's retention counts from, or None
    if the group's offsets do not expire now."""
    if group.protocol_type is None:
        # A simple group: each offset lives offsets_retention_ms past its last commit.
        return om.commit_timestamp
    if group.state is EMPTY:
        # Retention counts from when the group became empty (or, for groups written by old
        # brokers without that timestamp, from the commit).
        if group.state_timestamp is not None:
            return group.state_timestamp
        return om.commit_timestamp
    if (
        group.uses_consumer_protocol()
        and group.subscribed_topics is not None
        and (group.state is STABLE)
    ):
        # A live consumer group: offsets of topics it no longer subscribes to expire.
        return om.commit_timestamp
    return None


def expire_offsets(ctx: Ctx) -> None:
    """Tombstones for expired offsets, and for empty groups left without offsets."""
    shard = ctx.shard
    for group_id in list(shard.groups):
        group = shard.groups[group_id]
        all_expired = _expire_group_offsets(
            ctx, group_id, group.is_subscribed_to_topic, lambda om, g=group: _expiration_base(g, om)
        )
        # A group with nothing left to keep is deleted, as Kafka does. A group with ids handed
        # out by MEMBER_ID_REQUIRED is mid-join and is kept.
        if all_expired and group.state is EMPTY and not group.pending_join:
            ctx.append(group_record_key(group_id), None)
    for group_id in list(shard.consumer_groups):
        consumer = shard.consumer_groups[group_id]
        # A consumer group's offsets count from their commit (Kafka's ConsumerGroup), and
        # those of topics it subscribes to do not expire.
        all_expired = _expire_group_offsets(
            ctx, group_id, consumer.is_subscribed_to_topic, lambda om: om.commit_timestamp
        )
        if all_expired and consumer.is_empty():
            delete_group_and_offsets(ctx, consumer)


def delete_topic_offsets(ctx: Ctx, topics: Collection[str]) -> None:
    """Tombstones for every group's offsets of deleted topics (Kafka's onPartitionsDeleted).
    A group left empty and without offsets goes at the next expiration pass."""
    doomed = [
        (group_id, topic, partition)
        for group_id, committed in ctx.shard.offsets.by_group.items()
        for topic in topics
        for partition in committed.get(topic, ())
    ]
    for group_id, topic, partition in doomed:  # each append removes its offset at once
        ctx.append(offset_record_key(group_id, topic, partition), None)


def _expire_group_offsets(
    ctx: Ctx, group_id: str, is_subscribed: Any, expiration_base: Any
) -> bool:
    """Tombstones for the group's expired offsets; whether none is left."""
    retention = ctx.config.offsets_retention_ms
    committed = ctx.shard.offsets.of_group(group_id)
    all_expired = True
    expired: list[tuple[str, int]] = []
    for topic, partitions in committed.items():
        if is_subscribed(topic):
            all_expired = False
            continue
        for partition, om in partitions.items():
            if om.expire_timestamp != -1:
                # Written by an old broker with an explicit expiry (OffsetCommit v2-4).
                is_expired = ctx.now >= om.expire_timestamp
            else:
                base = expiration_base(om)
                is_expired = base is not None and ctx.now - base >= retention
            if is_expired:
                expired.append((topic, partition))
            else:
                all_expired = False
    for topic, partition in expired:
        ctx.append(offset_record_key(group_id, topic, partition), None)
    return all_expired
