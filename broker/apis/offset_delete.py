from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from broker.security.acls import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import OffsetDeleteRequest, OffsetDeleteResponse


@serves(ApiKey.OFFSET_DELETE, 0, 0)
def handle(ctx: RequestContext, req: OffsetDeleteRequest):
    if not ctx.allowed(Operation.DELETE, ResourceType.GROUP, req.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    m = meta(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.delete_offsets(req, m, rid, now),
        lambda code: OffsetDeleteResponse(error_code=code),
    )
