"""Computing a group's target assignment for a new group epoch (Kafka's TargetAssignmentBuilder):
the server assignor runs over every member's subscription and current target, and the records
are the delta: one TargetAssignmentMember record per member whose target changed, then the
TargetAssignmentMetadata record with the new epoch."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from coordinator.assignors import assignor as _assignor
from coordinator.assignors.spec import AssignorError, GroupSpec, MemberSpec
from coordinator.modern import records
from coordinator.modern.assignment import EMPTY, Assignment
from coordinator.modern.group import ConsumerGroup
from coordinator.modern.member import ConsumerGroupMember
from coordinator.modern.regex import RegexResolution
from coordinator.modern.topics_image import TopicMeta


def build_target(
    group: ConsumerGroup,
    epoch: int,
    assignor_name: str,
    subscription: Mapping[str, TopicMeta],
    regexes: Mapping[str, RegexResolution],
    updated: ConsumerGroupMember | None = None,
    removed: str | None = None,
) -> tuple[dict[str, Assignment], list[records.Record]]:
    """The new target of every member and the records that persist it. `updated` is a member
    (new or changed) not yet applied to the group; `removed` one that is leaving."""
    members: dict[str, ConsumerGroupMember] = dict(group.members)
    current: dict[str, Assignment] = dict(group.target)
    if removed is not None:
        members.pop(removed, None)
    if updated is not None:
        mid = updated.member_id
        previous = group.static_members.get(updated.instance_id or "", None)
        if updated.instance_id is not None and previous is not None and previous != mid:
            # A static member rejoined under a new id: it takes over the old one's target.
            members.pop(previous, None)
            current[mid] = group.target.get(previous, EMPTY)
        members[mid] = updated

    ids = {name: t.topic_id for name, t in subscription.items()}
    resolved = dict(regexes)
    specs: dict[str, MemberSpec] = {}
    # Members mostly share one subscription: its topic-id set is built once, and a shared
    # set makes the homogeneity check an identity test.
    topic_ids: dict[frozenset[str], frozenset[uuid.UUID]] = {}
    first: frozenset[uuid.UUID] | None = None
    homogeneous = True
    for mid, m in members.items():
        names = group.member_topic_names(m, resolved)
        topics = topic_ids.get(names)
        if topics is None:
            topics = topic_ids[names] = frozenset(ids[n] for n in names if n in ids)
        if first is None:
            first = topics
        elif homogeneous and topics is not first and topics != first:
            homogeneous = False
        specs[mid] = MemberSpec(topics, current.get(mid, EMPTY), m.instance_id, m.rack_id)
    spec = GroupSpec(
        specs,
        {t.topic_id: t.partitions for t in subscription.values()},
        homogeneous,
    )
    try:
        result = _assignor(assignor_name).assign(spec)
    except AssignorError as e:
        message = f"failed to compute a target assignment for epoch {epoch}: {e}"
        raise AssignorError(message) from None

    out: list[records.Record] = []
    for mid in specs:
        new = result.get(mid, EMPTY)
        old = group.target.get(mid)
        if old is None or (new is not old and new != old):
            out.append(records.target_assignment(group.group_id, mid, new))
    out.append(records.target_epoch(group.group_id, epoch))
    return result, out
