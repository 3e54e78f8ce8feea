from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from protocol.messages import HeartbeatResponse

HEARTBEAT = 12


@serves(HEARTBEAT, 0, 4)
def handle(ctx: RequestContext, req):
    m = meta(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.heartbeat(req, m, rid, now),
        lambda code: HeartbeatResponse(error_code=code),
    )
