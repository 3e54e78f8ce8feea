from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from protocol.messages import OffsetDeleteResponse

OFFSET_DELETE = 47


@serves(OFFSET_DELETE, 0, 0)
def handle(ctx: RequestContext, req):
    m = meta(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.delete_offsets(req, m, rid, now),
        lambda code: OffsetDeleteResponse(error_code=code),
    )
