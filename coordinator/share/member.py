"""A member of a share group, as Kafka's ShareGroupMember: a value that handlers copy and
replay puts in the group. Two records carry it: ShareGroupMemberMetadata (who it is and what it
subscribes to) and ShareGroupCurrentMemberAssignment (its epoch and partitions). Partitions are
shared between members, so there is no revocation: a member moves straight to its target."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from coordinator.modern.assignment import Assignment, from_topic_partitions
from coordinator.modern.assignment import to_topic_partitions as _tps
from protocol.coordinator_records import (
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataValue,
)

LEAVE_EPOCH = -1
STABLE = 0  # the only member state a share group has


@dataclass(slots=True)
class ShareGroupMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)

    def metadata_key(self) -> tuple:
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names)

    def metadata_value(self) -> ShareGroupMemberMetadataValue:
        return ShareGroupMemberMetadataValue(
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=sorted(self.subscribed_topic_names),
        )

    def assignment_value(self) -> ShareGroupCurrentMemberAssignmentValue:
        tps = ShareGroupCurrentMemberAssignmentValue.TopicPartitions
        return ShareGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=STABLE,
            assigned_partitions=_tps(self.assigned, tps),
        )

    def with_metadata(self, value: ShareGroupMemberMetadataValue) -> ShareGroupMember:
        return replace(
            self,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=frozenset(value.subscribed_topic_names),
        )

    def with_assignment(self, value: ShareGroupCurrentMemberAssignmentValue) -> ShareGroupMember:
        return replace(
            self,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            assigned=from_topic_partitions(value.assigned_partitions),
        )
