"""OffsetCommit / OffsetFetch / OffsetDelete, retention and deleted topics, as Kafka's
OffsetMetadataManager does them, for every kind of group alike (through `coordinator.group.Group`;
the offsets themselves are in `offset_store`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING

from coordinator.context import Ctx
from coordinator.group import ExpirationCondition, Group, PartitionCheck
from coordinator.keys import offset_record_key
from coordinator.state import ShardState
from protocol.coordinator_records import OffsetCommitKey, OffsetCommitValue
from protocol.errors import ErrorCode
from protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from protocol.types import ZERO_UUID

if TYPE_CHECKING:
    from coordinator.request_meta import RequestMeta

# OffsetCommit v9+ answers GROUP_ID_NOT_FOUND for a member commit to an unknown group; older
# versions keep ILLEGAL_GENERATION, which their clients understand.
GROUP_ID_NOT_FOUND_VERSION = 9
# Only OffsetCommit v1 carries a per-partition commit timestamp.
COMMIT_TIMESTAMP_VERSION = 1


def _utf16_len(s: str) -> int:
    # Kafka bounds String.length(): UTF-16 code units, not bytes.
    return len(s.encode("utf-16-le")) // 2


def _validate_commit(
    group: Group | None, req: OffsetCommitRequest, version: int
) -> tuple[ErrorCode, PartitionCheck | None]:
    """(group-level error, per-partition check (topic, partition) -> error, or None)."""
    generation = req.generation_id_or_member_epoch
    if group is None:
        if generation < 0:
            # A "simple" commit (admin client, or a consumer assigning partitions itself): the
            # group comes into being, holding only offsets, when the first record is applied.
            return ErrorCode.NONE, None
        if version >= GROUP_ID_NOT_FOUND_VERSION:
            return ErrorCode.GROUP_ID_NOT_FOUND, None
        return ErrorCode.ILLEGAL_GENERATION, None
    return group.validate_offset_commit(req.member_id, req.group_instance_id, generation, version)


def commit_error_response(
    topics: Iterable[OffsetCommitRequest.OffsetCommitRequestTopic], code: int
) -> OffsetCommitResponse:
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


# Reply entries of committed partitions, one per partition index, shared by every reply
# (nothing changes a reply entry once made): one object fewer to build per partition.
_OK_SHARED_BELOW = 1 << 16
_ok_partitions: list[OffsetCommitResponse.OffsetCommitResponsePartition] = []


def _ok_partition(index: int) -> OffsetCommitResponse.OffsetCommitResponsePartition:
    """The reply entry of a committed partition ``index``."""
    if 0 <= index < len(_ok_partitions):
        return _ok_partitions[index]
    make = OffsetCommitResponse.OffsetCommitResponsePartition.make
    if not 0 <= index < _OK_SHARED_BELOW:
        return make(index, 0)
    _ok_partitions.extend(make(i, 0) for i in range(len(_ok_partitions), index + 1))
    return _ok_partitions[index]


def commit_offsets(ctx: Ctx, req: OffsetCommitRequest, meta: RequestMeta, req_id: int) -> None:
    version = meta.api_version
    Topic = OffsetCommitResponse.OffsetCommitResponseTopic
    Partition = OffsetCommitResponse.OffsetCommitResponsePartition
    make_topic = Topic.make
    group = ctx.state.groups.get(req.group_id)
    error, check = _validate_commit(group, req, version)
    if error != ErrorCode.NONE:
        ctx.reply(req_id, commit_error_response(req.topics, error))
        return
    if group is not None:
        renewal = group.session_renewal(req.member_id)
        if renewal is not None:
            ctx.schedule(*renewal)

    max_len = ctx.config.offset_metadata_max_bytes
    half = max_len // 2
    group_id = req.group_id
    now = ctx.now
    with_timestamps = version == COMMIT_TIMESTAMP_VERSION
    # v2-v4's RetentionTimeMs: Kafka keeps such an offset until now + retention (an
    # OffsetCommitValue v1 with its expire timestamp), unless the group subscribes to the topic.
    retention = req.retention_time_ms
    expire = -1 if retention == -1 or not 2 <= version <= 4 else now + retention
    # The hot loop of every commit: names bound once, objects built positionally.
    make_key, make_value, make_partition = (
        OffsetCommitKey.make,
        OffsetCommitValue.make,
        Partition.make,
    )
    ok = _ok_partitions
    topics = []
    for t in req.topics:
        name = t.name
        partitions: list[OffsetCommitResponse.OffsetCommitResponsePartition] = []
        add = partitions.append
        records: list[tuple[OffsetCommitKey, OffsetCommitValue]] = []
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
            ts = p.commit_timestamp if with_timestamps and p.commit_timestamp != -1 else now
            write(
                (
                    make_key(group_id, name, index),
                    # offset, leader epoch, metadata, commit timestamp, expire timestamp
                    make_value(p.committed_offset, p.committed_leader_epoch, metadata, ts, expire),
                )
            )
            add(ok[index] if 0 <= index < len(ok) else _ok_partition(index))
        if records:
            ctx.append_offset_commits(group_id, name, records)
        topics.append(make_topic(name, ZERO_UUID, partitions))
    ctx.reply(req_id, OffsetCommitResponse(topics=topics))


OffsetRow = tuple[str, int, int, int, str, int]


def fetch_offsets(
    state: ShardState,
    group_id: str,
    topics: list[tuple[str, list[int]]] | None,
    member_id: str | None = None,
    member_epoch: int = -1,
    require_stable: bool = False,
) -> tuple[int, list[OffsetRow]]:
    """(group error, [(topic, partition, offset, leader epoch, metadata, error)]).

    An unknown group, or a partition without a commit, reads as offset -1 with no error; a
    group that does not exist has no partitions when all are asked for. The group checks the
    member first (a consumer group, for OffsetFetch v9+): an unknown member or a stale epoch
    is a group error and no offsets. With ``require_stable``, a partition with transactional
    offsets waiting for their marker is UNSTABLE_OFFSET_COMMIT (the client retries).
    """
    group = state.groups.get(group_id)
    if group is None:
        committed = {}
    else:
        error = group.validate_offset_fetch(member_id, member_epoch)
        if error != ErrorCode.NONE:
            return int(error), []
        committed = state.offsets.of_group(group_id)
    rows: list[OffsetRow] = []
    if topics is None:
        for topic, partitions in committed.items():
            for partition, om in partitions.items():
                rows.append((topic, partition, om.offset, om.leader_epoch, om.metadata, 0))
        return 0, _unstable(state, group_id, rows) if require_stable else rows
    for topic, partition_ids in topics:
        partitions = committed.get(topic, {})
        for partition in partition_ids:
            found = partitions.get(partition)
            if found is None:
                rows.append((topic, partition, -1, -1, "", 0))
            else:
                rows.append((topic, partition, found.offset, found.leader_epoch, found.metadata, 0))
    return 0, _unstable(state, group_id, rows) if require_stable else rows


def _unstable(state: ShardState, group_id: str, rows: list[OffsetRow]) -> list[OffsetRow]:
    if not state.pending_txn:
        return rows
    unstable = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
    out = []
    for row in rows:
        topic, partition = row[0], row[1]
        if state.has_pending(group_id, topic, partition):
            row = (topic, partition, -1, -1, "", unstable)
        out.append(row)
    return out


def delete_offsets(ctx: Ctx, req: OffsetDeleteRequest, meta: RequestMeta, req_id: int) -> None:
    def fail(error: ErrorCode) -> None:
        ctx.reply(req_id, OffsetDeleteResponse(error_code=int(error)))

    if not req.group_id:
        return fail(ErrorCode.INVALID_GROUP_ID)
    group = ctx.state.groups.get(req.group_id)
    if group is None:
        return fail(ErrorCode.GROUP_ID_NOT_FOUND)
    error = group.validate_offset_delete()
    if error != ErrorCode.NONE:
        return fail(error)
    return _delete_offsets(ctx, req, req_id, group)


def _delete_offsets(ctx: Ctx, req: OffsetDeleteRequest, req_id: int, group: Group) -> None:
    Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
    Partition = OffsetDeleteResponse.OffsetDeleteResponsePartition
    store = ctx.state.offsets
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


def expire_offsets(ctx: Ctx) -> None:
    """Tombstones for expired offsets, and for groups left with nothing to keep (Kafka's
    cleanupGroupMetadata)."""
    for group_id, group in list(ctx.state.groups.items()):
        all_expired = _expire_group_offsets(
            ctx, group_id, group.is_subscribed_to_topic, group.offset_expiration_condition()
        )
        if all_expired and group.should_expire():
            for key, value in group.tombstone_records():
                ctx.append(key, value)


def delete_topic_offsets(ctx: Ctx, topics: Collection[str]) -> None:
    """Tombstones for every group's offsets of deleted topics (Kafka's onPartitionsDeleted).
    A group left empty and without offsets goes at the next expiration pass."""
    doomed = [
        (group_id, topic, partition)
        for group_id, committed in ctx.state.offsets.by_group.items()
        for topic in topics
        for partition in committed.get(topic, ())
    ]
    for group_id, topic, partition in doomed:  # each append removes its offset at once
        ctx.append(offset_record_key(group_id, topic, partition), None)


def _expire_group_offsets(
    ctx: Ctx,
    group_id: str,
    is_subscribed: Callable[[str], bool],
    condition: ExpirationCondition | None,
) -> bool:
    """Tombstones for the group's expired offsets; whether none is left."""
    retention = ctx.config.offsets_retention_ms
    committed = ctx.state.offsets.of_group(group_id)
    all_expired = True
    expired: list[tuple[str, int]] = []
    for topic, partitions in committed.items():
        if is_subscribed(topic):
            all_expired = False
            continue
        for partition, om in partitions.items():
            if condition is None:  # (a rebalancing group, say): nothing of it expires now
                is_expired = False
            elif om.expire_timestamp != -1:
                # Committed with an explicit retention (OffsetCommit v2-4).
                is_expired = ctx.now >= om.expire_timestamp
            else:
                is_expired = ctx.now - condition(om) >= retention
            if is_expired:
                expired.append((topic, partition))
            else:
                all_expired = False
    for topic, partition in expired:
        ctx.append(offset_record_key(group_id, topic, partition), None)
    return all_expired
