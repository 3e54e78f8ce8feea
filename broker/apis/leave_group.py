from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from protocol.api_keys import ApiKey
from protocol.messages import LeaveGroupRequest, LeaveGroupResponse


@serves(ApiKey.LEAVE_GROUP, 0, 5)
def handle(ctx: RequestContext, req: LeaveGroupRequest):
    m = meta(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.leave_group(req, m, rid, now),
        lambda code: LeaveGroupResponse(error_code=code),
    )
