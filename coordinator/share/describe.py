"""ShareGroupDescribe (the ListGroups view is a `ShareGroup` method)."""

from __future__ import annotations

from coordinator.modern.assignment import Assignment
from coordinator.modern.topics_image import TopicsImage
from coordinator.share.group import ShareGroup
from protocol.errors import ErrorCode
from protocol.messages import ShareGroupDescribeResponse as Response

ASSIGNOR = "simple"


def _topic_partitions(assignment: Assignment, names: dict) -> list[Response.TopicPartitions]:
    return [
        Response.TopicPartitions(topic_id=t, topic_name=names[t], partitions=sorted(ps))
        for t, ps in sorted(assignment.items())
        if t in names and ps
    ]


def share_group_describe(
    group_id: str, group: object | None, topics: TopicsImage
) -> Response.DescribedGroup:
    if not isinstance(group, ShareGroup):
        message = (
            f"Group {group_id} not found."
            if group is None
            else f"Group {group_id} is not a share group."
        )
        return Response.DescribedGroup(
            group_id=group_id, error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), error_message=message
        )
    names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
    for tid, t in topics.by_id.items():
        names.setdefault(tid, t.name)
    members = [
        Response.Member(
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=sorted(m.subscribed_topic_names),
            assignment=Response.Assignment(topic_partitions=_topic_partitions(m.assigned, names)),
        )
        for m in group.members.values()
    ]
    return Response.DescribedGroup(
        group_id=group_id,
        group_state=str(group.state),
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=ASSIGNOR,
        members=members,
    )
