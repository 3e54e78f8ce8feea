"""ConsumerGroupDescribe, and the views of consumer groups in DescribeGroups and ListGroups."""

from __future__ import annotations

import struct
from typing import Any

from coordinator.modern.assignment import EMPTY, Assignment
from coordinator.modern.group import ConsumerGroup
from coordinator.modern.topics import TopicsImage
from protocol.errors import ErrorCode
from protocol.messages import (
    ConsumerGroupDescribeResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
)

GROUP_TYPE = "consumer"
PROTOCOL_TYPE = "consumer"
Described = ConsumerGroupDescribeResponse.DescribedGroup


def _names(group: ConsumerGroup, topics: TopicsImage) -> dict:
    names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
    for tid, t in topics.by_id.items():
        names.setdefault(tid, t.name)
    return names


def _topic_partitions(assignment: Assignment, names: dict) -> list[Any]:
    cls = ConsumerGroupDescribeResponse.TopicPartitions
    return [
        cls(topic_id=t, topic_name=names[t], partitions=sorted(ps))
        for t, ps in sorted(assignment.items())
        if t in names and ps
    ]


def consumer_group_describe(
    group_id: str, group: ConsumerGroup | None, default_assignor: str, topics: TopicsImage
) -> Any:
    if group is None:
        return Described(
            group_id=group_id,
            error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
            error_message=f"Group {group_id} not found.",
        )
    names = _names(group, topics)
    Assignment_ = ConsumerGroupDescribeResponse.Assignment
    members = [
        ConsumerGroupDescribeResponse.Member(
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=sorted(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=Assignment_(topic_partitions=_topic_partitions(m.assigned, names)),
            target_assignment=Assignment_(
                topic_partitions=_topic_partitions(group.target.get(m.member_id, EMPTY), names)
            ),
        )
        for m in group.members.values()
    ]
    return Described(
        group_id=group_id,
        group_state=str(group.state),
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(None, None) or default_assignor,
        members=members,
    )


def _consumer_protocol_assignment(assignment: Assignment, names: dict) -> bytes:
    """A ConsumerProtocolAssignment v0 (what classic tools expect in DescribeGroups)."""
    topics = [(names[t], sorted(ps)) for t, ps in sorted(assignment.items()) if t in names]
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for name, parts in sorted(topics):
        raw = name.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    out += struct.pack(">i", -1)  # no user data
    return bytes(out)


def describe_groups_view(group: ConsumerGroup, topics: TopicsImage) -> Any:
    """DescribeGroups (v0-5) of a consumer group: its members with their current assignment
    in the classic consumer-protocol encoding, so that classic admin tools can read it."""
    names = _names(group, topics)
    members = [
        DescribeGroupsResponse.DescribedGroupMember(
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=b"",
            member_assignment=_consumer_protocol_assignment(m.assigned, names),
        )
        for m in group.members.values()
    ]
    return DescribeGroupsResponse.DescribedGroup(
        group_id=group.group_id,
        group_state=str(group.state),
        protocol_type=PROTOCOL_TYPE,
        protocol_data="",
        members=members,
    )


def list_groups(
    groups: dict[str, ConsumerGroup], states: set[str] | None, types: set[str] | None
) -> list[Any]:
    if types and GROUP_TYPE not in {t.strip().lower() for t in types}:
        return []
    state_filter = {s.strip().lower() for s in states} if states else None
    out = []
    for gid, g in groups.items():
        state = str(g.state)
        if state_filter is None or state.lower() in state_filter:
            out.append(
                ListGroupsResponse.ListedGroup(
                    group_id=gid,
                    protocol_type=PROTOCOL_TYPE,
                    group_state=state,
                    group_type=GROUP_TYPE,
                )
            )
    return out
