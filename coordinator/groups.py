"""DeleteGroups: remove empty groups (classic or consumer) together with their committed
offsets."""

from __future__ import annotations

from typing import Any

from coordinator.classic.group import DEAD, EMPTY
from coordinator.context import Ctx
from coordinator.keys import group_record_key, offset_record_key
from coordinator.modern.membership import delete_group_and_offsets
from protocol.errors import ErrorCode
from protocol.messages import DeleteGroupsResponse


def delete_groups(ctx: Ctx, group_ids: list[str]) -> list[Any]:
    Result = DeleteGroupsResponse.DeletableGroupResult
    results = []
    for group_id in dict.fromkeys(group_ids):  # once each, in request order
        consumer = ctx.shard.consumer_groups.get(group_id)
        if consumer is not None:
            if consumer.is_empty():
                error = ErrorCode.NONE
                delete_group_and_offsets(ctx, consumer)
            else:
                error = ErrorCode.NON_EMPTY_GROUP
            results.append(Result(group_id=group_id, error_code=int(error)))
            continue
        group = ctx.shard.groups.get(group_id)
        if group is None or group.state is DEAD:
            error = ErrorCode.GROUP_ID_NOT_FOUND
        elif group.state is not EMPTY:
            error = ErrorCode.NON_EMPTY_GROUP
        else:
            error = ErrorCode.NONE
            offsets = ctx.shard.offsets.of_group(group_id)
            doomed = [(t, p) for t, parts in offsets.items() for p in parts]
            for topic, partition in doomed:
                ctx.append(offset_record_key(group_id, topic, partition), None)
            ctx.append(group_record_key(group_id), None)
        results.append(Result(group_id=group_id, error_code=int(error)))
    return results
