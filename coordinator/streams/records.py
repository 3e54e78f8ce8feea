"""The StreamsGroup* records (types 17, 19-23), built as Kafka's StreamsCoordinatorRecordHelpers
builds them. A record is a (key, value) pair; a None value is a tombstone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.streams.member import StreamsGroupMember
from coordinator.streams.tasks import TaskMap, Tasks
from coordinator.streams.topology import Topology
from protocol.coordinator_records import (
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMetadataKey,
    StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMemberValue,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTargetAssignmentMetadataValue,
    StreamsGroupTopologyKey,
)

Record = tuple[Any, Any | None]
KEY_TYPES = (
    StreamsGroupMetadataKey,
    StreamsGroupMemberMetadataKey,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupTopologyKey,
)


def member_metadata(group_id: str, member: StreamsGroupMember) -> Record:
    key = StreamsGroupMemberMetadataKey(group_id=group_id, member_id=member.member_id)
    return key, member.metadata_value()


def current_assignment(group_id: str, member: StreamsGroupMember) -> Record:
    key = StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member.member_id)
    return key, member.assignment_value()


def _target_ids(tasks: TaskMap) -> list:
    cls = StreamsGroupTargetAssignmentMemberValue.TaskIds
    return [cls(subtopology_id=s, partitions=sorted(tasks[s])) for s in sorted(tasks)]


def target_assignment(group_id: str, member_id: str, tasks: Tasks) -> Record:
    key = StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id)
    value = StreamsGroupTargetAssignmentMemberValue(
        active_tasks=_target_ids(tasks.active),
        standby_tasks=_target_ids(tasks.standby),
        warmup_tasks=_target_ids(tasks.warmup),
    )
    return key, value


def target_metadata(group_id: str, epoch: int, timestamp: int) -> Record:
    key = StreamsGroupTargetAssignmentMetadataKey(group_id=group_id)
    value = StreamsGroupTargetAssignmentMetadataValue(
        assignment_epoch=epoch, assignment_timestamp=timestamp
    )
    return key, value


def group_metadata(
    group_id: str,
    epoch: int,
    metadata_hash: int,
    validated_topology_epoch: int,
    assignment_configs: Mapping[str, str],
) -> Record:
    cls = StreamsGroupMetadataValue.LastAssignmentConfig
    value = StreamsGroupMetadataValue(
        epoch=epoch,
        metadata_hash=metadata_hash,
        validated_topology_epoch=validated_topology_epoch,
        last_assignment_configs=[
            cls(key=k, value=v) for k, v in sorted(assignment_configs.items())
        ],
    )
    return StreamsGroupMetadataKey(group_id=group_id), value


def topology(group_id: str, t: Topology) -> Record:
    return StreamsGroupTopologyKey(group_id=group_id), t.to_record()


def remove_member(group_id: str, member_id: str) -> list[Record]:
    """Kafka's order: current assignment, target assignment, then the member itself."""
    return [
        (StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None),
        (StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None),
        (StreamsGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None),
    ]


def group_tombstones(group_id: str, members: list[str]) -> list[Record]:
    """Every record of a streams group, deleted (Kafka's createGroupTombstoneRecords)."""
    out: list[Record] = []
    for mid in members:
        out.append((StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=mid), None))
    for mid in members:
        out.append((StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=mid), None))
    out.append((StreamsGroupTargetAssignmentMetadataKey(group_id=group_id), None))
    for mid in members:
        out.append((StreamsGroupMemberMetadataKey(group_id=group_id, member_id=mid), None))
    out.append((StreamsGroupMetadataKey(group_id=group_id), None))
    out.append((StreamsGroupTopologyKey(group_id=group_id), None))
    return out
