"""The ConsumerGroup* records (types 3-8 and 16), built as Kafka's GroupCoordinatorRecordHelpers
builds them. A record is a (key, value) pair; a None value is a tombstone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.modern.assignment import Assignment, to_topic_partitions
from coordinator.modern.member import ConsumerGroupMember
from coordinator.modern.regex import RegexResolution
from coordinator.modern.topics_image import TopicMeta
from protocol.coordinator_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

Record = tuple[Any, Any | None]


def member_metadata(group_id: str, member: ConsumerGroupMember) -> Record:
    key = ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member.member_id)
    return key, member.metadata_value()


def member_metadata_tombstone(group_id: str, member_id: str) -> Record:
    return ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None


def current_assignment(group_id: str, member: ConsumerGroupMember) -> Record:
    key = ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member.member_id)
    return key, member.assignment_value()


def current_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None


def target_assignment(group_id: str, member_id: str, assignment: Assignment) -> Record:
    key = ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id)
    cls = ConsumerGroupTargetAssignmentMemberValue.TopicPartition
    value = ConsumerGroupTargetAssignmentMemberValue(
        topic_partitions=to_topic_partitions(assignment, cls)
    )
    return key, value


def target_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None


def target_epoch(group_id: str, epoch: int) -> Record:
    key = ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id)
    return key, ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch)


def target_epoch_tombstone(group_id: str) -> Record:
    return ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id), None


def group_epoch(group_id: str, epoch: int) -> Record:
    return ConsumerGroupMetadataKey(group_id=group_id), ConsumerGroupMetadataValue(epoch=epoch)


def group_epoch_tombstone(group_id: str) -> Record:
    return ConsumerGroupMetadataKey(group_id=group_id), None


def subscription_metadata(group_id: str, metadata: Mapping[str, TopicMeta]) -> Record:
    cls = ConsumerGroupPartitionMetadataValue.TopicMetadata
    topics = [
        cls(topic_id=t.topic_id, topic_name=t.name, num_partitions=t.partitions)
        for _, t in sorted(metadata.items())
    ]
    key = ConsumerGroupPartitionMetadataKey(group_id=group_id)
    return key, ConsumerGroupPartitionMetadataValue(topics=topics)


def subscription_metadata_tombstone(group_id: str) -> Record:
    return ConsumerGroupPartitionMetadataKey(group_id=group_id), None


def regex(group_id: str, pattern: str, resolution: RegexResolution) -> Record:
    key = ConsumerGroupRegularExpressionKey(group_id=group_id, regular_expression=pattern)
    value = ConsumerGroupRegularExpressionValue(
        topics=sorted(resolution.topics),
        version=resolution.version,
        timestamp=resolution.timestamp,
    )
    return key, value


def regex_tombstone(group_id: str, pattern: str) -> Record:
    return ConsumerGroupRegularExpressionKey(group_id=group_id, regular_expression=pattern), None


def remove_member(group_id: str, member_id: str) -> list[Record]:
    """Kafka's order: current assignment, target assignment, then the member itself."""
    return [
        current_assignment_tombstone(group_id, member_id),
        target_assignment_tombstone(group_id, member_id),
        member_metadata_tombstone(group_id, member_id),
    ]


def group_tombstones(
    group_id: str, members: list[str], targets: list[str], regexes: list[str]
) -> list[Record]:
    """Every record of a consumer group, deleted, in Kafka's order
    (createConsumerGroupTombstoneRecords)."""
    out: list[Record] = []
    for mid in members:
        out.append(current_assignment_tombstone(group_id, mid))
    for mid in targets:
        out.append(target_assignment_tombstone(group_id, mid))
    out.append(target_epoch_tombstone(group_id))
    for mid in members:
        out.append(member_metadata_tombstone(group_id, mid))
    for rx in regexes:
        out.append(regex_tombstone(group_id, rx))
    out.append(subscription_metadata_tombstone(group_id))
    out.append(group_epoch_tombstone(group_id))
    return out
