"""DescribeGroups and ListGroups views of classic groups, as Kafka's GroupMetadataManager."""

from __future__ import annotations

from typing import Any

from coordinator.classic.group import DEAD, STABLE, ClassicGroup
from protocol.messages import DescribeGroupsResponse, ListGroupsResponse

GROUP_TYPE = "classic"


def describe(group_id: str, group: ClassicGroup | None) -> Any:
    Described = DescribeGroupsResponse.DescribedGroup
    Member = DescribeGroupsResponse.DescribedGroupMember
    if group is None:
        # Kafka (DescribeGroups v0-5) reports an unknown group as Dead, without an error.
        return Described(group_id=group_id, group_state=str(DEAD))
    stable = group.state is STABLE
    members = [
        Member(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            # Members' metadata is only meaningful once the protocol is settled.
            member_metadata=m.metadata(group.protocol_name) if stable else b"",
            member_assignment=m.assignment,
        )
        for m in group.members.values()
    ]
    return Described(
        group_id=group_id,
        group_state=str(group.state),
        protocol_type=group.protocol_type or "",
        protocol_data=(group.protocol_name or "") if stable else "",
        members=members,
    )


def list_groups(
    groups: dict[str, ClassicGroup], states: set[str] | None, types: set[str] | None
) -> list[Any]:
    Listed = ListGroupsResponse.ListedGroup
    state_filter = {s.strip().lower() for s in states} if states else None
    if types and GROUP_TYPE not in {t.strip().lower() for t in types}:
        return []
    return [
        Listed(
            group_id=gid,
            protocol_type=g.protocol_type or "",
            group_state=str(g.state),
            group_type=GROUP_TYPE,
        )
        for gid, g in groups.items()
        if state_filter is None or str(g.state).lower() in state_filter
    ]
