"""Folding ConsumerGroup* records into a consumer group (Kafka's GroupMetadataManager.replay for
record types 3-8 and 16). Which group a record goes to, and the group's creation and deletion
(a record for an id held by a "simple" group, one that only holds offsets, replaces it, as in
Kafka; a deleted group that still has offsets leaves a simple group to hold them), is the
shard state's business (`coordinator.state`).
"""

from __future__ import annotations

from typing import Any

from coordinator.group import MemberChange
from coordinator.modern.assignment import from_topic_partitions
from coordinator.modern.group import ConsumerGroup
from coordinator.modern.member import ConsumerGroupMember
from coordinator.modern.regex import RegexResolution
from coordinator.modern.topics_image import TopicMeta
from protocol.coordinator_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)

KEY_TYPES = (
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupRegularExpressionKey,
)


def apply(group: ConsumerGroup, key: Any, value: Any | None) -> MemberChange | None:
    """Fold one record (not the group's own tombstone) into `group`."""
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        member = group.members.get(key.member_id)
        if value is not None:
            group.put_member((member or ConsumerGroupMember(key.member_id)).with_metadata(value))
            if member is None:
                return MemberChange(group.group_id, True, key.member_id)
        elif member is not None:
            group.remove_member(key.member_id)
            return MemberChange(group.group_id, False, key.member_id)
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        member = group.members.get(key.member_id)
        if value is not None:
            group.put_member((member or ConsumerGroupMember(key.member_id)).with_assignment(value))
            if member is None:
                return MemberChange(group.group_id, True, key.member_id)
        elif member is not None:
            group.put_member(member.left())
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        if value is not None:
            group.set_target(key.member_id, from_topic_partitions(value.topic_partitions))
        else:
            group.remove_target(key.member_id)
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        group.assignment_epoch = -1 if value is None else value.assignment_epoch
    elif isinstance(key, ConsumerGroupMetadataKey):
        assert value is not None, "the group's tombstone is folded by ShardState.replay"
        group.group_epoch = value.epoch
    elif isinstance(key, ConsumerGroupPartitionMetadataKey):
        group.subscription_metadata = (
            {}
            if value is None
            else {
                t.topic_name: TopicMeta(t.topic_id, t.topic_name, t.num_partitions)
                for t in value.topics
            }
        )
    elif isinstance(key, ConsumerGroupRegularExpressionKey):
        if value is None:
            group.regexes.pop(key.regular_expression, None)
        else:
            group.regexes[key.regular_expression] = RegexResolution(
                frozenset(value.topics), value.version, value.timestamp
            )
    return None
