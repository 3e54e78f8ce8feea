"""A share group (KIP-932), as Kafka's ShareGroup: the state its ShareGroup* records fold into.

Members join and heartbeat with ShareGroupHeartbeat; the coordinator assigns partitions that
several members may share, and the share-partition side (not offsets in this log) tracks what
each has read. So the offset APIs and DescribeGroups refuse share groups, as Kafka's do.
"""

from __future__ import annotations

import enum
from typing import Any

from coordinator.group import ExpirationCondition, PartitionCheck, Record
from coordinator.modern.assignment import Assignment, from_topic_partitions
from coordinator.modern.topics_image import TopicMeta, TopicsImage
from coordinator.share import records
from coordinator.share.member import ShareGroupMember
from protocol.coordinator_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupPartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
)
from protocol.errors import ErrorCode
from protocol.messages import DescribeGroupsResponse, ListGroupsResponse


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


class ShareGroup:
    """A share group; with the methods under "the Group protocol", a `coordinator.group.Group`."""

    type = "share"
    protocol_type = "share"

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareGroupMember] = {}
        self.target: dict[str, Assignment] = {}
        self.subscription_metadata: dict[str, TopicMeta] = {}
        self.subscribed_names: dict[str, int] = {}  # topic name -> members subscribing
        # Transient: the topics image version the subscription metadata was last checked
        # against.
        self.metadata_version = -1

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.EMPTY if not self.members else ShareGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def subscriptions(self, updated: ShareGroupMember | None = None) -> dict[str, frozenset[str]]:
        """Member id -> subscribed topic names, with `updated` in place of its old self."""
        subs = {mid: m.subscribed_topic_names for mid, m in self.members.items()}
        if updated is not None:
            subs[updated.member_id] = updated.subscribed_topic_names
        return subs

    # -- the Group protocol ---------------------------------------------------------------------

    def is_simple(self) -> bool:
        return False

    def _not_here(self) -> ErrorCode:
        return ErrorCode.GROUP_ID_NOT_FOUND

    def validate_offset_commit(
        self, member_id: str, instance_id: str | None, generation: int, version: int
    ) -> tuple[ErrorCode, PartitionCheck | None]:
        # A share group's progress is its share partitions' state, not committed offsets.
        return self._not_here(), None

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        return self._not_here()

    def validate_offset_delete(self) -> ErrorCode:
        return self._not_here()

    def validate_delete_group(self) -> ErrorCode:
        return ErrorCode.NONE if self.is_empty() else ErrorCode.NON_EMPTY_GROUP

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_names

    def offset_expiration_condition(self) -> ExpirationCondition | None:
        return None

    def should_expire(self) -> bool:
        return False  # a share group stays until it is deleted, as in Kafka

    def session_renewal(self, member_id: str) -> tuple[tuple, int] | None:
        return None

    def tombstone_records(self) -> list[Record]:
        return records.group_tombstones(self.group_id, list(self.members), list(self.target))

    def describe(self, topics: TopicsImage) -> DescribeGroupsResponse.DescribedGroup:
        # DescribeGroups (v0-5) knows classic groups only: Kafka describes others as Dead.
        return DescribeGroupsResponse.DescribedGroup(
            group_id=self.group_id, group_state=str(ShareGroupState.DEAD)
        )

    def listed(self) -> ListGroupsResponse.ListedGroup:
        return ListGroupsResponse.ListedGroup(
            group_id=self.group_id,
            protocol_type=self.protocol_type,
            group_state=str(self.state),
            group_type=self.type,
        )

    # -- replay ---------------------------------------------------------------------------------

    def put_member(self, member: ShareGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._count(old, -1)
        self.members[member.member_id] = member
        self._count(member, 1)

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._count(old, -1)

    def _count(self, member: ShareGroupMember, delta: int) -> None:
        for name in member.subscribed_topic_names:
            n = self.subscribed_names.get(name, 0) + delta
            if n > 0:
                self.subscribed_names[name] = n
            else:
                self.subscribed_names.pop(name, None)


def apply(group: ShareGroup, key: Any, value: Any | None) -> bool:
    """Fold one record (not the group's own tombstone) into `group`; True when a member
    joined (its first record)."""
    if isinstance(key, ShareGroupMemberMetadataKey):
        member = group.members.get(key.member_id)
        if value is None:
            group.remove_member(key.member_id)
            return False
        group.put_member((member or ShareGroupMember(key.member_id)).with_metadata(value))
        return member is None
    if isinstance(key, ShareGroupCurrentMemberAssignmentKey):
        member = group.members.get(key.member_id)
        if value is not None:
            group.put_member((member or ShareGroupMember(key.member_id)).with_assignment(value))
            return member is None
        return False
    if isinstance(key, ShareGroupTargetAssignmentMemberKey):
        if value is None:
            group.target.pop(key.member_id, None)
        else:
            group.target[key.member_id] = from_topic_partitions(value.topic_partitions)
    elif isinstance(key, ShareGroupTargetAssignmentMetadataKey):
        group.assignment_epoch = -1 if value is None else value.assignment_epoch
    elif isinstance(key, ShareGroupMetadataKey):
        assert value is not None, "the group's tombstone is folded by ShardState.replay"
        group.group_epoch = value.epoch
    elif isinstance(key, ShareGroupPartitionMetadataKey):
        group.subscription_metadata = (
            {}
            if value is None
            else {
                t.topic_name: TopicMeta(t.topic_id, t.topic_name, t.num_partitions)
                for t in value.topics
            }
        )
    return False
