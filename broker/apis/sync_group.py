from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import SyncGroupRequest, SyncGroupResponse


@serves(ApiKey.SYNC_GROUP, 0, 5)
def handle(ctx: RequestContext, req: SyncGroupRequest):
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    m = meta(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.sync_group(req, m, rid, now),
        lambda code: SyncGroupResponse(error_code=code),
    )
