from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from broker.security.acls import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import HeartbeatRequest, HeartbeatResponse


@serves(ApiKey.HEARTBEAT, 0, 4)
def handle(ctx: RequestContext, req: HeartbeatRequest):
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    m = meta(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.heartbeat(req, m, rid, now),
        # While the coordinator loads, Kafka answers heartbeats blindly with NONE: clients
        # (aiokafka among them) treat COORDINATOR_LOAD_IN_PROGRESS on a heartbeat as fatal.
        lambda code: HeartbeatResponse(
            error_code=ErrorCode.NONE if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else code
        ),
    )
