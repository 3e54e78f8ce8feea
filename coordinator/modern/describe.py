"""ConsumerGroupDescribe (the DescribeGroups and ListGroups views are `ConsumerGroup` methods)."""

from __future__ import annotations

from coordinator.modern.assignment import EMPTY, Assignment
from coordinator.modern.group import ConsumerGroup
from coordinator.modern.topics_image import TopicsImage
from protocol.errors import ErrorCode
from protocol.messages import ConsumerGroupDescribeResponse

Described = ConsumerGroupDescribeResponse.DescribedGroup
# MemberType (v1, KIP-1099); v0 responses leave it out.
CLASSIC_MEMBER = 0
CONSUMER_MEMBER = 1


def _topic_partitions(
    assignment: Assignment, names: dict
) -> list[ConsumerGroupDescribeResponse.TopicPartitions]:
    cls = ConsumerGroupDescribeResponse.TopicPartitions
    return [
        cls(topic_id=t, topic_name=names[t], partitions=sorted(ps))
        for t, ps in sorted(assignment.items())
        if t in names and ps
    ]


def consumer_group_describe(
    group_id: str, group: ConsumerGroup | None, default_assignor: str, topics: TopicsImage
) -> Described:
    if group is None:
        return Described(
            group_id=group_id,
            error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
            error_message=f"Group {group_id} not found.",
        )
    names = group.topic_names(topics)
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
            member_type=CLASSIC_MEMBER if m.uses_classic_protocol() else CONSUMER_MEMBER,
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
