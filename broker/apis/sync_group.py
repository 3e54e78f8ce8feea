from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from protocol.api_keys import ApiKey
from protocol.messages import SyncGroupRequest, SyncGroupResponse


@serves(ApiKey.SYNC_GROUP, 0, 5)
def handle(ctx: RequestContext, req: SyncGroupRequest):
    m = meta(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.sync_group(req, m, rid, now),
        lambda code: SyncGroupResponse(error_code=code),
    )
