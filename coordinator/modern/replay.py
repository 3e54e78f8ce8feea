"""Folding ConsumerGroup* records into the shard's consumer groups (Kafka's
GroupMetadataManager.replay for record types 3-8 and 16).

A record for a group id held by a "simple" classic group (one that only holds offsets) replaces
it, as in Kafka; the deletion of a consumer group that still has committed offsets leaves a
simple group to hold them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coordinator.modern.assignment import from_topic_partitions
from coordinator.modern.group import ConsumerGroup, RegexResolution
from coordinator.modern.member import ConsumerGroupMember
from coordinator.modern.topics import TopicMeta
from protocol.coordinator_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)

if TYPE_CHECKING:
    from coordinator.shard import Shard

KEY_TYPES = (
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupRegularExpressionKey,
)


def _group(shard: Shard, group_id: str, create: bool) -> ConsumerGroup | None:
    group = shard.consumer_groups.get(group_id)
    if group is None and create:
        classic = shard.groups.get(group_id)
        if classic is not None:
            if not classic.is_simple():
                raise ValueError(f"group {group_id} is a classic group, not a consumer group")
            del shard.groups[group_id]
        group = shard.consumer_groups[group_id] = ConsumerGroup(group_id)
    return group


def apply(shard: Shard, key: Any, value: Any | None) -> None:
    group = _group(shard, key.group_id, value is not None)
    if group is None:
        return  # a tombstone for a group that is gone
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        member = group.members.get(key.member_id)
        if value is not None:
            base = member or ConsumerGroupMember(key.member_id)
            group.put_member(base.with_metadata(value))
        elif member is not None:
            group.remove_member(key.member_id)
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        member = group.members.get(key.member_id)
        if value is not None:
            base = member or ConsumerGroupMember(key.member_id)
            group.put_member(base.with_assignment(value))
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
        if value is not None:
            group.group_epoch = value.epoch
        else:
            del shard.consumer_groups[key.group_id]
            if shard.offsets.of_group(key.group_id):
                shard.new_simple_group(key.group_id)
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
