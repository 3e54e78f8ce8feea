"""The ShareGroup* records (types 9-14), built as Kafka's GroupCoordinatorRecordHelpers builds
them. A record is a (key, value) pair; a None value is a tombstone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.modern.assignment import Assignment, to_topic_partitions
from coordinator.modern.topics_image import TopicMeta
from coordinator.share.member import ShareGroupMember
from protocol.coordinator_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupPartitionMetadataKey,
    ShareGroupPartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)

Record = tuple[Any, Any | None]
KEY_TYPES = (
    ShareGroupMetadataKey,
    ShareGroupPartitionMetadataKey,
    ShareGroupMemberMetadataKey,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupCurrentMemberAssignmentKey,
)


def member_metadata(group_id: str, member: ShareGroupMember) -> Record:
    key = ShareGroupMemberMetadataKey(group_id=group_id, member_id=member.member_id)
    return key, member.metadata_value()


def current_assignment(group_id: str, member: ShareGroupMember) -> Record:
    key = ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member.member_id)
    return key, member.assignment_value()


def target_assignment(group_id: str, member_id: str, assignment: Assignment) -> Record:
    cls = ShareGroupTargetAssignmentMemberValue.TopicPartition
    key = ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id)
    value = ShareGroupTargetAssignmentMemberValue(
        topic_partitions=to_topic_partitions(assignment, cls)
    )
    return key, value


def target_epoch(group_id: str, epoch: int) -> Record:
    key = ShareGroupTargetAssignmentMetadataKey(group_id=group_id)
    return key, ShareGroupTargetAssignmentMetadataValue(assignment_epoch=epoch)


def group_epoch(group_id: str, epoch: int) -> Record:
    return ShareGroupMetadataKey(group_id=group_id), ShareGroupMetadataValue(epoch=epoch)


def subscription_metadata(group_id: str, metadata: Mapping[str, TopicMeta]) -> Record:
    cls = ShareGroupPartitionMetadataValue.TopicMetadata
    topics = [
        cls(topic_id=t.topic_id, topic_name=t.name, num_partitions=t.partitions)
        for _, t in sorted(metadata.items())
    ]
    key = ShareGroupPartitionMetadataKey(group_id=group_id)
    return key, ShareGroupPartitionMetadataValue(topics=topics)


def remove_member(group_id: str, member_id: str) -> list[Record]:
    """Kafka's order: current assignment, target assignment, then the member itself."""
    return [
        (ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None),
        (ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None),
        (ShareGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None),
    ]


def group_tombstones(group_id: str, members: list[str], targets: list[str]) -> list[Record]:
    """Every record of a share group, deleted, the group's own last."""
    out: list[Record] = []
    for mid in members:
        out.append((ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=mid), None))
    for mid in targets:
        out.append((ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=mid), None))
    out.append((ShareGroupTargetAssignmentMetadataKey(group_id=group_id), None))
    for mid in members:
        out.append((ShareGroupMemberMetadataKey(group_id=group_id, member_id=mid), None))
    out.append((ShareGroupPartitionMetadataKey(group_id=group_id), None))
    out.append((ShareGroupMetadataKey(group_id=group_id), None))
    return out
