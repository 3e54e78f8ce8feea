"""DeleteGroups: remove empty groups, of any kind, together with their committed offsets."""

from __future__ import annotations

from coordinator.context import Ctx
from coordinator.group import Group
from coordinator.keys import offset_record_key
from protocol.errors import ErrorCode
from protocol.messages import DeleteGroupsResponse


def delete_groups(
    ctx: Ctx, group_ids: list[str]
) -> list[DeleteGroupsResponse.DeletableGroupResult]:
    Result = DeleteGroupsResponse.DeletableGroupResult
    results = []
    for group_id in dict.fromkeys(group_ids):  # once each, in request order
        group = ctx.state.groups.get(group_id)
        error = ErrorCode.GROUP_ID_NOT_FOUND if group is None else group.validate_delete_group()
        if group is not None and error == ErrorCode.NONE:
            delete_group_and_offsets(ctx, group)
        results.append(Result(group_id=group_id, error_code=int(error)))
    return results


def delete_group_and_offsets(ctx: Ctx, group: Group) -> None:
    """Tombstones for the group's offsets, then for the group (Kafka's order)."""
    gid = group.group_id
    doomed = [(t, p) for t, parts in ctx.state.offsets.of_group(gid).items() for p in parts]
    for topic, partition in doomed:  # each append removes its offset at once
        ctx.append(offset_record_key(gid, topic, partition), None)
    for key, value in group.tombstone_records():
        ctx.append(key, value)
