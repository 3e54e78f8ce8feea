from __future__ import annotations

from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.encoded import Encoded
from protocol.errors import ErrorCode
from protocol.messages import RESPONSES, HeartbeatRequest, HeartbeatResponse

# The steady heartbeat's reply (NONE), encoded once per version.
_OK = [
    Encoded(RESPONSES[ApiKey.HEARTBEAT].encode(HeartbeatResponse(error_code=0), v), v)
    for v in range(5)
]


@serves(ApiKey.HEARTBEAT, 0, 4)
def handle(ctx: RequestContext, req: HeartbeatRequest):
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    groups = ctx.broker.groups
    # A member of a stable group at its generation: only its session is renewed.
    if groups.renew(req.group_id, lambda shard, now: shard.steady_heartbeat(req, now)) is not None:
        return _OK[ctx.api_version]
    m = meta(ctx)
    return groups.call(
        req.group_id,
        lambda shard, rid, now: shard.heartbeat(req, m, rid, now),
        # While the coordinator loads, Kafka answers heartbeats blindly with NONE: clients
        # (aiokafka among them) treat COORDINATOR_LOAD_IN_PROGRESS on a heartbeat as fatal.
        lambda code: HeartbeatResponse(
            error_code=ErrorCode.NONE if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else code
        ),
    )
