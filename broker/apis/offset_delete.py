from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from protocol.api_keys import ApiKey
from protocol.messages import OffsetDeleteRequest, OffsetDeleteResponse


@serves(ApiKey.OFFSET_DELETE, 0, 0)
def handle(ctx: RequestContext, req: OffsetDeleteRequest):
    m = meta(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.delete_offsets(req, m, rid, now),
        lambda code: OffsetDeleteResponse(error_code=code),
    )
