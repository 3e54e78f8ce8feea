from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from protocol.api_keys import ApiKey
from protocol.messages import JoinGroupRequest, JoinGroupResponse


@serves(ApiKey.JOIN_GROUP, 0, 9)
def handle(ctx: RequestContext, req: JoinGroupRequest):
    m = meta(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.join_group(req, m, rid, now),
        lambda code: JoinGroupResponse(error_code=code, member_id=req.member_id),
    )
