from __future__ import annotations

from broker.apis._consumer_groups import topics_image
from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import JoinGroupRequest, JoinGroupResponse


@serves(ApiKey.JOIN_GROUP, 0, 9)
def handle(ctx: RequestContext, req: JoinGroupRequest):
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return JoinGroupResponse(
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id=req.member_id
        )
    m = meta(ctx)
    # A consumer group with classic members assigns them itself: it needs the topics.
    image = topics_image(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.join_group(req, m, rid, now, image),
        lambda code: JoinGroupResponse(error_code=code, member_id=req.member_id),
    )
